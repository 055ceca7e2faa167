"""One rank's part of a program whose state stays on the rank between calls (a training session).

A training step takes the batch and the state (parameters, optimizer state) and returns the loss and the next
state; run step after step, the state never needs to leave the ranks. `ResidentRank` holds this rank's blocks
of the resident arguments and runs the kernel graph with the batch blocks it is given: each result that
`feeds` an argument replaces that argument's block (no copy), the other results are returned. The same class
serves a rank of a job the session started (`runtime.jobs.rank_server`) and a rank of the user's own MPI job
(`runtime.jobs.in_job_session.InJobSession`), so both run the same code.

A step is all or nothing. A run-time check that fails on the step's data (a token id past an embedding's table)
on some rank does not stop that rank mid-step: every rank finishes the step (`RankExecutor.run`), then the ranks
agree (an allreduce of one integer) and, if any check failed, every rank drops the
step's results and raises the same KernelAssertionError: the state stays bit for bit what it was, and the next
step runs as if the failed one had not been asked. Why not check the inputs before the step instead: the checks
are arbitrary conditions inside kernels (an embedding's bound, a gather's, a user's assert), on values the
program computes, not only on its arguments; finishing the step costs nothing extra in memory (the results are
new blocks, and the old state is held until the step returns anyway) and, in time, an allreduce of one integer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from slicer.core.errors import InputError, KernelAssertionError
from slicer.lowering import CollectiveNode, KernelGraph

from ..execution.executor import RankExecutor, RunOptions


class ResidentRank:
    """This rank's executor of `graph` and its blocks of the resident arguments.

    `feeds` maps a result index to the argument index it replaces after each step. The resident arguments are
    the ones `put` gave; every other argument is an input of each `step`."""

    def __init__(self, graph: KernelGraph, comm, *, feeds: Mapping[int, int], kernel_sources: dict | None = None,
                 names: Sequence[str] = (), options: RunOptions | None = None):
        """`names`: the arguments' names to report (a failed check names the inputs it depends on); `options`:
        how collectives run (`RankExecutor`)."""
        self.graph = graph
        self.feeds = dict(feeds)
        self.names = tuple(names)
        self.comm = comm
        self._failures = np.zeros(2, np.int32)  # the agreement's buffers: this rank's failed checks, every rank's
        self.executor = RankExecutor(graph, comm, options=options, kernel_sources=kernel_sources)
        self.rank = self.executor.rank
        self.resident: dict[int, np.ndarray] = {}
        self.steps = 0
        self.events: list = []  # the last step's timeline (`timings.Event`s), for profiles

    def put(self, blocks: Mapping[int, np.ndarray]) -> None:
        """Make these argument blocks resident (replacing any held), checked against their local shapes: all
        of them, or none if one does not fit."""
        self.resident.update({index: self.checked(index, block) for index, block in blocks.items()})

    def step(self, inputs: Mapping[int, np.ndarray]) -> dict[int, np.ndarray]:
        """Run once on the resident blocks and `inputs` (argument index -> this rank's block); the results
        that feed arguments become resident, the others are returned by result index."""
        blocks = []
        for index in range(len(self.graph.args)):
            if index in inputs:
                blocks.append(self.checked(index, inputs[index]))
            elif index in self.resident:
                blocks.append(self.resident[index])
            else:
                raise InputError(f"rank {self.rank}: argument #{index} ({self.graph.args[index]}) is neither "
                                 "resident nor given to this step")
        results, self.events = self._agreed_run(blocks, inputs)
        self.steps += 1
        returned = {}
        for index, block in enumerate(results):
            if index in self.feeds:
                self.resident[self.feeds[index]] = block
            else:
                returned[index] = block
        return returned

    def _agreed_run(self, blocks: list[np.ndarray], inputs: Mapping[int, np.ndarray]):
        """The executor's run of the step, unless a check failed on any rank: then KernelAssertionError on
        every rank (nothing replaced), saying which rank, kernel and check, and which inputs it depends on."""
        failure = None
        try:
            outcome = self.executor.run(blocks)
        except KernelAssertionError:
            if self.executor.failed is None:
                raise
            node, error = self.executor.failed
            failure = (self.rank, self.graph.nodes[node].name, getattr(error, "check", str(error)),
                       self._inputs_of(node, inputs))
        self._failures[0] = failure is not None
        self.comm.Allreduce(self._failures[:1], self._failures[1:])  # the sum over the ranks (MPI's default op)
        if not self._failures[1]:
            return outcome
        rank, kernel, check, names = next(f for f in self.comm.allgather(failure) if f is not None)
        on = f"on the step's input(s) {', '.join(map(repr, names))}" if names else "on the state"
        raise KernelAssertionError(
            "the step was not applied, the state is as it was before it: a run-time check of the "
            f"program failed on rank {rank} in kernel @{kernel}: '{check}', {on} (for example a token id not "
            "smaller than an embedding's number of rows, which PyTorch refuses with an IndexError); fix the batch "
            "and step again")

    def _inputs_of(self, node: int, inputs: Mapping[int, np.ndarray]) -> list[str]:
        """The names of the step's inputs (of `inputs`) that node `node`'s inputs are computed from."""
        graph = self.graph
        producer = {}
        for index, each in enumerate(graph.nodes):
            for value in ((each.output,) if isinstance(each, CollectiveNode) else each.outputs):
                producer[value] = index
        seen, frontier, found = set(), [node], set()
        while frontier:
            each = graph.nodes[frontier.pop()]
            for value in ((each.input,) if isinstance(each, CollectiveNode) else each.inputs):
                if value in seen:
                    continue
                seen.add(value)
                if value in producer:
                    frontier.append(producer[value])
                elif value in graph.args:
                    found.add(graph.args.index(value))
        return [self.names[i] if i < len(self.names) else graph.args[i] for i in sorted(found) if i in inputs]

    def blocks(self, indexes) -> dict[int, np.ndarray]:
        """This rank's resident blocks of the arguments `indexes`."""
        missing = [i for i in indexes if i not in self.resident]
        if missing:
            raise InputError(f"rank {self.rank}: arguments {missing} are not resident")
        return {i: self.resident[i] for i in indexes}

    def close(self) -> None:
        """Free the collectives' buffers and communicators (collective: every rank calls it)."""
        self.executor.close()

    def checked(self, index: int, block) -> np.ndarray:
        value = self.graph.values[self.graph.args[index]]
        block = np.require(np.asarray(block), requirements="C")
        if tuple(block.shape) != tuple(value.local_shape) or block.dtype != value.numpy_dtype:
            raise InputError(f"rank {self.rank}: argument #{index} ({self.graph.args[index]}) block is "
                             f"{block.dtype}{list(block.shape)}, expected {value.numpy_dtype}{list(value.local_shape)}")
        return block


__all__ = ["ResidentRank"]
