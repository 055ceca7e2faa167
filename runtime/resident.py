"""One rank's part of a program whose state stays on the rank between calls (a training session).

A training step takes the batch and the state (parameters, optimizer state) and returns the loss and the next
state; run step after step, the state never needs to leave the ranks. `ResidentRank` holds this rank's blocks
of the resident arguments and runs the kernel graph with the batch blocks it is given: each result that
`feeds` an argument replaces that argument's block (no copy), the other results are returned. The same class
serves a rank of a job the session started (`runtime.rank_server`) and a rank of the user's own MPI job
(`runtime.session.InJobSession`), so both run the same code.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from slicer.core.errors import InputError
from slicer.lowering import KernelGraph

from .executor import RankExecutor


class ResidentRank:
    """This rank's executor of `graph` and its blocks of the resident arguments.

    `feeds` maps a result index to the argument index it replaces after each step. The resident arguments are
    the ones `put` gave; every other argument is an input of each `step`."""

    def __init__(self, graph: KernelGraph, comm, *, feeds: Mapping[int, int], kernel_sources: dict | None = None):
        self.graph = graph
        self.feeds = dict(feeds)
        self.executor = RankExecutor(graph, comm, kernel_sources=kernel_sources)
        self.rank = self.executor.rank
        self.resident: dict[int, np.ndarray] = {}
        self.steps = 0
        self.events: list = []  # the last step's timeline (`timings.Event`s), for profiles

    def put(self, blocks: Mapping[int, np.ndarray]) -> None:
        """Make these argument blocks resident (replacing any held), checked against their local shapes."""
        for index, block in blocks.items():
            self.resident[index] = self._checked(index, block)

    def step(self, inputs: Mapping[int, np.ndarray]) -> dict[int, np.ndarray]:
        """Run once on the resident blocks and `inputs` (argument index -> this rank's block); the results
        that feed arguments become resident, the others are returned by result index."""
        blocks = []
        for index in range(len(self.graph.args)):
            if index in inputs:
                blocks.append(self._checked(index, inputs[index]))
            elif index in self.resident:
                blocks.append(self.resident[index])
            else:
                raise InputError(f"rank {self.rank}: argument #{index} ({self.graph.args[index]}) is neither "
                                 "resident nor given to this step")
        results, self.events = self.executor.run(blocks)
        self.steps += 1
        returned = {}
        for index, block in enumerate(results):
            if index in self.feeds:
                self.resident[self.feeds[index]] = block
            else:
                returned[index] = block
        return returned

    def blocks(self, indexes) -> dict[int, np.ndarray]:
        """This rank's resident blocks of the arguments `indexes`."""
        missing = [i for i in indexes if i not in self.resident]
        if missing:
            raise InputError(f"rank {self.rank}: arguments {missing} are not resident")
        return {i: self.resident[i] for i in indexes}

    def close(self) -> None:
        """Free the collectives' buffers and communicators (collective: every rank calls it)."""
        self.executor.close()

    def _checked(self, index: int, block) -> np.ndarray:
        value = self.graph.values[self.graph.args[index]]
        block = np.require(np.asarray(block), requirements="C")
        if tuple(block.shape) != tuple(value.local_shape) or block.dtype != value.numpy_dtype:
            raise InputError(f"rank {self.rank}: argument #{index} ({self.graph.args[index]}) block is "
                             f"{block.dtype}{list(block.shape)}, expected {value.numpy_dtype}{list(value.local_shape)}")
        return block


__all__ = ["ResidentRank"]
