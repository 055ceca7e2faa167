"""Training sessions: a program run step after step with its state kept where it runs (`Program.session`).

A training step's arguments are the batch and the state (parameters, buffers, optimizer state); its results
are the loss and the next state, each named like the argument it replaces (`SessionPlan.feeds`). A session
keeps the state resident in its partitioned layout and, at each `step(*batch)`, sends only the batch: every
rank gets its block of each batch array, the results that feed arguments replace them in place on the rank,
and the others (the loss) come back. `state_dict()` assembles the global state.

Three kinds, one interface:
- `SimulatedSession` (ranks=None): the in-process simulator, holding the state as global arrays;
- `LaunchedSession` (ranks=N): a job of N ranks started once (`runtime.rank_job`), serving every step;
- `InJobSession`: under the user's own `mpiexec -n N python train.py`, every rank of COMM_WORLD holds its
  blocks and runs the step itself (as a torchrun script does); every rank gets the loss and the state dict.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from slicer.core.arrays import as_array
from slicer.core.errors import RunError
from slicer.lowering import KernelGraph

from .blocks import take_block
from .executor import kernel_sources, load_kernels
from .rank_job import RankJob, Sent
from .resident import ResidentRank
from .simulator import Simulator, assemble


@dataclass(frozen=True)
class SessionPlan:
    """How a program runs as a session: which arguments are inputs of each step (`inputs`, argument indexes
    in order), the state's initial global values (`state`: argument index -> array), which result replaces
    which argument (`feeds`: result index -> argument index) and the names to report (`arg_names`,
    `result_names`)."""

    graph: KernelGraph
    inputs: tuple[int, ...]
    state: Mapping[int, np.ndarray]
    feeds: Mapping[int, int]
    arg_names: tuple[str, ...]
    result_names: tuple[str, ...] = field(default=())

    @classmethod
    def stateless(cls, graph: KernelGraph) -> "SessionPlan":
        """The plan of a plain run: every argument an input, nothing resident, every result returned."""
        return cls(graph, tuple(range(len(graph.args))), {}, {}, tuple(graph.args))

    def check_layouts(self) -> None:
        """RunError unless each result that replaces an argument has that argument's distributed type:
        its blocks then replace the argument's blocks in place on every rank."""
        g = self.graph
        for result, arg in self.feeds.items():
            want, got = g.values[g.args[arg]].dist, g.result_dists[result]
            if want != got:
                raise RunError(f"result '{self._result_name(result)}' replaces argument '{self.arg_names[arg]}' but "
                               f"is laid out as {got} where the argument is {want}: tile the result like the "
                               "argument (Tile(result=...), as slicer.strategies do)")

    def _result_name(self, index: int) -> str:
        return self.result_names[index] if index < len(self.result_names) and self.result_names[index] \
            else f"result #{index}"

    def returned(self) -> tuple[int, ...]:
        """The results each step returns: those that replace no argument."""
        return tuple(i for i in range(len(self.graph.results)) if i not in self.feeds)

    def checked_inputs(self, arrays: Sequence) -> dict[int, np.ndarray]:
        """The batch as argument index -> array, checked against the arguments' shapes and dtypes."""
        if len(arrays) != len(self.inputs):
            names = ", ".join(self.arg_names[i] for i in self.inputs) or "none"
            raise RunError(f"a step takes {len(self.inputs)} input(s) ({names}), got {len(arrays)} (the state is "
                           "held by the session: pass the batch only)")
        checked = {}
        for index, array in zip(self.inputs, arrays):
            array = np.asarray(array)
            value = self.graph.values[self.graph.args[index]]
            shape = self.graph.arg_shape(index)  # its logical shape (the type's is padded on uneven dims)
            if tuple(array.shape) != shape or array.dtype != value.numpy_dtype:
                raise RunError(f"input '{self.arg_names[index]}' must be {value.numpy_dtype}{list(shape)}, "
                               f"got {array.dtype}{list(array.shape)}")
            checked[index] = array
        return checked

    def block(self, array: np.ndarray, index: int, rank: int) -> np.ndarray:
        """`rank`'s block of argument `index` taken from its global value."""
        g = self.graph
        return take_block(array, g.values[g.args[index]].dist, g.mesh, rank)

    def outputs(self, per_rank: list[dict[int, np.ndarray]]):
        """The returned results assembled from every rank's blocks (one array, or a tuple of several)."""
        g = self.graph
        out = [assemble(g.mesh, g.result_dists[i], [blocks[i] for blocks in per_rank], self._result_name(i),
                        g.result_shape(i)) for i in self.returned()]
        return out[0] if len(out) == 1 else tuple(out)

    def state_from(self, per_rank: list[dict[int, np.ndarray]]) -> dict[str, np.ndarray]:
        g = self.graph
        return {self.arg_names[i]: assemble(g.mesh, g.values[g.args[i]].dist, [blocks[i] for blocks in per_rank],
                                            self.arg_names[i], g.arg_shape(i)) for i in sorted(self.state)}


def load_program(job: RankJob, plan: SessionPlan) -> None:
    """Make `plan`'s program the one `job`'s ranks run: its kernels compiled (or found in the cache) here,
    once, and only loaded by the ranks."""
    kernels, backend = load_kernels(plan.graph)
    job.request([("load", plan.graph.to_json(), kernel_sources(kernels, backend), dict(plan.feeds))] * job.ranks)


class Session(ABC):
    """The interface of every session: `step(*batch)`, `state_dict()`, `steps`, a context manager."""

    def __init__(self, plan: SessionPlan):
        self.plan = plan
        self.steps = 0

    def step(self, *batch):
        """Run one step on `batch` (numpy arrays or torch tensors); returns the results that replace no
        argument (the loss): one array, or a tuple."""
        outputs = self._step(self.plan.checked_inputs([as_array(b) for b in batch]))
        self.steps += 1
        return outputs

    @abstractmethod
    def state_dict(self) -> dict[str, np.ndarray]:
        """The state as global numpy arrays, by argument name."""

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @abstractmethod
    def _step(self, inputs: dict[int, np.ndarray]):
        """One step on the checked batch (argument index -> global array); the returned results."""


class SimulatedSession(Session):
    """The session on the in-process simulator: the state as global arrays, every device simulated."""

    def __init__(self, plan: SessionPlan, simulator: Simulator):
        super().__init__(plan)
        self.simulator = simulator
        self.state = {i: np.array(a) for i, a in plan.state.items()}

    def _step(self, inputs):
        arrays = [inputs[i] if i in inputs else self.state[i] for i in range(len(self.plan.graph.args))]
        results = self.simulator(*arrays)
        results = results if isinstance(results, tuple) else (results,)
        for result, arg in self.plan.feeds.items():
            self.state[arg] = results[result]
        out = [results[i] for i in self.plan.returned()]
        return out[0] if len(out) == 1 else tuple(out)

    def state_dict(self):
        return {self.plan.arg_names[i]: self.state[i].copy() for i in sorted(self.state)}


class LaunchedSession(Session):
    """The session on a job of `ranks` MPI ranks started for it: the state stays on the ranks."""

    def __init__(self, plan: SessionPlan, ranks: int, *, mpiexec: str | None = None, timeout: float = 600):
        super().__init__(plan)
        plan.check_layouts()
        self.job = RankJob(ranks, mpiexec=mpiexec, timeout=timeout)
        try:
            load_program(self.job, plan)
            self.job.request([("put", {i: plan.block(a, i, r) for i, a in plan.state.items()}) for r in range(ranks)])
        except BaseException:
            self.job.close(graceful=False)
            raise

    @property
    def sent(self) -> Sent:
        """What the session sent to the ranks so far (array bytes and bytes on the wire)."""
        return self.job.sent

    def _step(self, inputs):
        ranks = self.job.ranks
        replies = self.job.request([("step", {i: self.plan.block(a, i, r) for i, a in inputs.items()})
                                    for r in range(ranks)])
        return self.plan.outputs(replies)

    def state_dict(self):
        return self.plan.state_from(self.job.request([("get", sorted(self.plan.state))] * self.job.ranks))

    def close(self):
        self.job.close()


class InJobSession(Session):
    """The session inside the user's MPI job: this rank holds its blocks and runs its part of each step."""

    def __init__(self, plan: SessionPlan, comm):
        super().__init__(plan)
        plan.check_layouts()
        self.comm = comm
        self.rank_program = ResidentRank(plan.graph, comm, feeds=plan.feeds)
        rank = self.rank_program.rank
        self.rank_program.put({i: plan.block(a, i, rank) for i, a in plan.state.items()})

    def _step(self, inputs):
        rank = self.rank_program.rank
        returned = self.rank_program.step({i: self.plan.block(a, i, rank) for i, a in inputs.items()})
        return self.plan.outputs(self.comm.allgather(returned))

    def state_dict(self):
        mine = self.rank_program.blocks(sorted(self.plan.state))
        return self.plan.state_from(self.comm.allgather(mine))

    def close(self):
        self.rank_program.close()


__all__ = ["InJobSession", "LaunchedSession", "Session", "SessionPlan", "SimulatedSession", "load_program"]
