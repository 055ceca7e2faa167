"""What a rank holds while it runs a kernel graph: its tracked buffers and their peak.

The executor keeps every block it has (argument blocks, kernel outputs, collective results) in one dict by
value name. `BufferTracker` drops each value after its last use (the liveness of
`KernelGraph.live_bytes_per_node`, so measured and estimated memory count the same things) and records the
peak of the bytes held, measured after every node while its inputs and outputs are both held. Buffers inside
a kernel or an MPI call are not tracked (neither are they in the estimate, except the collectives' own
scratch that `slicer.viz.memory` adds).
"""

from __future__ import annotations

import numpy as np

from slicer.lowering import CollectiveNode, KernelGraph


def live_bytes(env: dict) -> int:
    """Bytes of the distinct arrays in `env` (a block held under two names counts once)."""
    seen = set()
    total = 0
    for array in env.values():
        if not isinstance(array, np.ndarray):
            continue
        key = (array.__array_interface__["data"][0], array.nbytes)
        if key not in seen:
            seen.add(key)
            total += array.nbytes
    return total


class BufferTracker:
    """Drops values from an executor's environment after their last use and records the peak bytes held."""

    def __init__(self, graph: KernelGraph):
        last_use = graph.last_uses()
        count = len(graph.nodes)
        produced = {name: 0 for name in graph.args}
        for index, node in enumerate(graph.nodes):
            for name in ((node.output,) if isinstance(node, CollectiveNode) else node.outputs):
                produced[name] = index
        self.release: list[list[str]] = [[] for _ in range(count)]
        for name, index in produced.items():
            end = max(index, last_use.get(name, -1))
            if end < count:
                self.release[end].append(name)
        self.peak = 0

    def start(self, env: dict) -> None:
        """Before the first node: the argument blocks."""
        self.peak = max(self.peak, live_bytes(env))

    def step(self, index: int, env: dict) -> None:
        """After node `index` produced its outputs: count what is held, then drop what no later node reads."""
        self.peak = max(self.peak, live_bytes(env))
        for name in self.release[index]:
            env.pop(name, None)
