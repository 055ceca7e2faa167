"""What a rank holds while it runs a kernel graph: its tracked buffers and their peak.

The executor keeps every block it has (argument blocks, kernel outputs, collective results) in one dict by
value name. `BufferTracker` drops each value after its last use (the liveness of
`KernelGraph.live_bytes_per_node`, so measured and estimated memory count the same things) and records the
peak of the bytes held, measured after every node while its inputs and outputs are both held. Buffers inside
a kernel or an MPI call are not tracked (neither are they in the estimate, except the collectives' own
scratch that `slicer.viz.memory` adds).
"""

from __future__ import annotations

import weakref

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
    """Drops values from an executor's environment after their last use and records the peak bytes held.

    The bytes held are counted incrementally (each node's outputs added, each released value taken away, a
    buffer held under several names counted once): summing the whole environment after every node cost time per
    held array, and a training step holds hundreds of blocks."""

    def __init__(self, graph: KernelGraph):
        last_use = graph.last_uses()
        count = len(graph.nodes)
        produced = {name: 0 for name in graph.args}
        self.outputs: list[tuple[str, ...]] = []
        for index, node in enumerate(graph.nodes):
            outputs = (node.output,) if isinstance(node, CollectiveNode) else tuple(node.outputs)
            self.outputs.append(outputs)
            for name in outputs:
                produced[name] = index
        self.release: list[list[str]] = [[] for _ in range(count)]
        for name, index in produced.items():
            end = max(index, last_use.get(name, -1))
            if end < count:
                self.release[end].append(name)
        self.peak = 0
        self.held = 0
        self._buffers: dict[tuple[int, int], int] = {}  # (address, bytes) -> names holding it
        self._keys: dict[str, tuple[int, int]] = {}
        # The addresses of the arrays that come back run after run (the argument blocks), by identity: reading an
        # address from numpy is slow, and a training step's optimizer kernels take and return hundreds of blocks.
        self._addresses: dict[int, tuple[weakref.ref, int]] = {}

    def _address(self, array: np.ndarray) -> int:
        found = self._addresses.get(id(array))
        if found is not None and found[0]() is array:
            return found[1]
        address = array.__array_interface__["data"][0]
        self._addresses[id(array)] = (weakref.ref(array), address)
        return address

    def _add(self, name: str, array, address: int | None = None) -> None:
        if not isinstance(array, np.ndarray) or name in self._keys:
            return
        key = (self._address(array) if address is None else address, array.nbytes)
        self._keys[name] = key
        holders = self._buffers.get(key, 0)
        self._buffers[key] = holders + 1
        if not holders:
            self.held += array.nbytes

    def _drop(self, name: str) -> None:
        key = self._keys.pop(name, None)
        if key is None:
            return
        holders = self._buffers.pop(key) - 1
        if holders:
            self._buffers[key] = holders
        else:
            self.held -= key[1]

    def start(self, env: dict) -> None:
        """Before the first node: the argument blocks."""
        self.held = 0
        self._buffers.clear()
        self._keys.clear()
        self._addresses = {key: found for key, found in self._addresses.items() if found[0]() is not None}
        for name, array in env.items():
            self._add(name, array)
        self.peak = max(self.peak, self.held)

    def step(self, index: int, env: dict, addresses=None) -> None:
        """After node `index` produced its outputs: count what is held, then drop what no later node reads.
        `addresses`: its outputs' buffer addresses, when the kernel that made them says (`Kernel.addresses`)."""
        for i, name in enumerate(self.outputs[index]):
            if name in env:
                self._add(name, env[name], addresses[i] if addresses else None)
        self.peak = max(self.peak, self.held)
        for name in self.release[index]:
            if env.pop(name, None) is not None:
                self._drop(name)
