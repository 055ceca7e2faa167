"""Training sessions: a program run step after step with its state kept where it runs (`Program.session`).

A step's arguments are the batch and the state (parameters, buffers, optimizer state); its results are the loss
and the next state, each named like the argument it replaces (`SessionPlan.feeds`). A session keeps the state on
the ranks in its partitioned form and, at each `step(*batch)`, sends only the batch. Three kinds, one interface:
`SimulatedSession` (ranks=None: the in-process simulator), `LaunchedSession` (a job of N ranks started once,
`runtime.jobs.rank_job`) and `InJobSession` (every rank of the user's own `mpiexec` job runs the step itself,
`in_job_session.py`).
Each saves and loads checkpoints (`runtime.state.checkpoint`, across hosts `checkpoint_hosts`): docs/runtime.md.
"""

from __future__ import annotations

import weakref
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from slicer.core import dtypes
from slicer.core.arrays import as_array
from slicer.core.errors import CheckpointError, InputError, RunError
from slicer.lowering import KernelGraph

from ..execution.blocks import rank_slices, take_block
from ..execution.executor import RunOptions
from ..simulation.simulator import Simulator, assemble
from ..state.checkpoint import (
    Checkpoint,
    StateValue,
    begin,
    open_checked,
    save_jobs,
    write_block,
    write_manifest,
    writers,
)
from ..state.checkpoint_hosts import open_fitting
from ..state.loaded_programs import program_key
from ..state.reshard import Reshard, plan_moves, target_plan
from .program_load import load_program, preload_program
from .rank_job import RankJob, Sent


@dataclass(frozen=True)
class SessionPlan:
    """How a program runs as a session: which arguments are inputs of each step (`inputs`, argument indexes
    in order), the state's initial global values (`state`: argument index -> array), which result replaces
    which argument (`feeds`: result index -> argument index) and the names to report (`arg_names`,
    `result_names`). A training step's hyperparameters (`hyper`: argument index -> name, e.g. "lr") are inputs
    the session sets before every step from `hyper_values(step number, given) -> name -> float` (the
    optimizer's settings and schedules, what `step(lr=...)` gives first; `ImportedProgram.hyperparameters`)."""

    graph: KernelGraph
    inputs: tuple[int, ...]
    state: Mapping[int, np.ndarray]
    feeds: Mapping[int, int]
    arg_names: tuple[str, ...]
    result_names: tuple[str, ...] = field(default=())
    hyper: Mapping[int, str] = field(default_factory=dict)
    hyper_values: Callable[[int, Mapping[str, object]], Mapping[str, float]] | None = None
    arrange: Callable[[Sequence[np.ndarray]], Mapping[int, np.ndarray]] | None = None
    """The batch (in `inputs`' order) -> {position in it: the array the program takes instead} (a load-balanced
    context-parallel step takes its sequence permuted: `ImportedProgram.arrange`)."""

    @classmethod
    def stateless(cls, graph: KernelGraph) -> SessionPlan:
        """The plan of a plain run: every argument an input, nothing resident, every result returned."""
        return cls(graph, tuple(range(len(graph.args))), {}, {}, tuple(graph.args))

    def check_feeds(self) -> None:
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
                               f"got {array.dtype}{list(array.shape)}{dtypes.conversion_hint(value.numpy_dtype)}")
            checked[index] = array
        if self.arrange is not None:
            for position, array in self.arrange([checked[i] for i in self.inputs]).items():
                checked[self.inputs[position]] = array
        return checked

    def hyper_inputs(self, step: int, given: Mapping[str, object]) -> dict[int, np.ndarray]:
        """The hyperparameters of step number `step` as argument index -> 0-d array: `given` where given, else
        the optimizer's; InputError for a program without them, an unknown name or a bad value."""
        if not self.hyper or self.hyper_values is None:
            if given:
                raise InputError(f"this program has no hyperparameters (no 'hyper' arguments: a training step's "
                                 f"lr, weight_decay, ...): pass the batch only, not {', '.join(given)}=")
            return {}
        values = self.hyper_values(step, given)
        g = self.graph
        return {i: np.asarray(values[name], dtype=g.values[g.args[i]].numpy_dtype) for i, name in self.hyper.items()}

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

    def state_jobs(self) -> list[list[int]]:
        """Which state blocks each rank sends for a state dict: every distinct block once, from its lowest rank
        (as a checkpoint writes them, `checkpoint.writers`), every rank's of a partial sum. A replicated state
        (data parallel) then crosses the wire once, not once per rank."""
        g = self.graph
        jobs: list[list[int]] = [[] for _ in range(g.mesh.device_count)]
        for value in self.state_values():
            ranks = range(g.mesh.device_count) if value.dist.partial else writers(g.mesh, value)
            for rank in ranks:
                jobs[rank].append(value.argument)
        return jobs

    def state_from(self, per_rank: list[dict[int, np.ndarray]]) -> dict[str, np.ndarray]:
        """The global state from the blocks `state_jobs` asked each rank for."""
        g, state = self.graph, {}
        for value in self.state_values():
            i, shape = value.argument, self.graph.arg_shape(value.argument)
            if value.dist.partial:
                state[value.name] = assemble(g.mesh, value.dist, [b[i] for b in per_rank], value.name, shape)
                continue
            blocks = {rank: per_rank[rank][i] for rank in writers(g.mesh, value)}
            if len(blocks) == 1:  # one block holds it all: no copy unless read-only (an in-band pickle's)
                whole = next(iter(blocks.values())).reshape(value.dist.shape)
                whole = whole if whole.flags.writeable else whole.copy()
            else:
                whole = np.empty(value.dist.shape, value.dtype)
                for rank, slices in writers(g.mesh, value).items():
                    whole[slices] = blocks[rank]
            cut = tuple(slice(0, n) for n in shape)
            state[value.name] = whole if tuple(shape) == whole.shape else np.ascontiguousarray(whole[cut])
        return state

    def state_values(self) -> list[StateValue]:
        """The state arguments as a checkpoint records them (index, name, dtype, distributed type)."""
        g = self.graph
        return [StateValue(i, self.arg_names[i], np.dtype(g.values[g.args[i]].numpy_dtype), g.values[g.args[i]].dist)
                for i in sorted(self.state)]

    def local_shape(self, index: int) -> tuple[int, ...]:
        """The shape of each rank's block of argument `index`."""
        return tuple(self.graph.values[self.graph.args[index]].local_shape)

    def restore_job(self, rank: int) -> dict[int, tuple[str, tuple[slice, ...]]]:
        """What `rank` reads from a checkpoint: argument index -> (state name, its block's index range)."""
        g = self.graph
        return {i: (self.arg_names[i], rank_slices(g.mesh, g.values[g.args[i]].dist, rank)) for i in sorted(self.state)}

class Session(ABC):
    """The interface of every session: `step(*batch)`, `state_dict()`, `steps`, a context manager."""

    def __init__(self, plan: SessionPlan):
        self.plan = plan
        self.steps = 0
        self.checkpoint: tuple[str, Path, int] | None = None  # the last one saved or loaded: (how, where, step)
        self.resharded: Reshard | None = None  # the moves that made this session (`reshard`), if they did

    def step(self, *batch, **hyperparameters):
        """Run one step on `batch` (numpy arrays or torch tensors); returns the results that replace no
        argument (the loss): one array, or a tuple. A training step's `hyperparameters` (e.g. `lr=1e-4`) hold
        for this step only; the others are the optimizer's settings, or their schedules' values at `steps`."""
        inputs = self.plan.checked_inputs([as_array(b) for b in batch])
        inputs.update(self.plan.hyper_inputs(self.steps, hyperparameters))
        outputs = self._step(inputs)
        self.steps += 1
        return outputs

    @abstractmethod
    def state_dict(self) -> dict[str, np.ndarray]:
        """The state as global numpy arrays, by argument name."""

    def save(self, directory) -> Path:
        """Write a checkpoint of the state to `directory` (runtime/state/checkpoint.py): every rank its own blocks,
        each file renamed into place once written, then the manifest (checksums, distributed types, step count)."""
        values = self.plan.state_values()
        directory = begin(directory)
        records = self._write_blocks(directory, save_jobs(self.plan.graph.mesh, values))
        write_manifest(directory, self.plan.graph.mesh, values, self.steps, records)
        self.checkpoint = ("saved", directory, self.steps)
        return directory

    def load(self, directory) -> None:
        """Replace the state by the checkpoint in `directory`, saved on any mesh and strategy: every file is
        checked against the manifest and the state's names, shapes and dtypes against this program before
        anything is replaced (CheckpointError otherwise); then each rank reads its block from the saved blocks
        that overlap it. The step count is the checkpoint's."""
        checkpoint = self._open(directory)
        self._restore(checkpoint)
        self.steps = checkpoint.step
        self.checkpoint = ("loaded", Path(directory), checkpoint.step)

    def reshard_plan(self, program) -> Reshard:
        """How `reshard(program)` would move the state (`Reshard.explain()`), without moving it."""
        return _planned_moves(self.plan, target_plan(self.plan, program))

    def reshard(self, program, *, budget: int | None = None) -> Session:
        """A session of `program` (a compiled program of the same model, or its `SessionPlan`) with this session's
        state moved on the ranks by the synthesizer's plans (`runtime/state/reshard.py`: what is refused;
        `budget`, bytes per device: `Reshard.check_budget`). This one is then done with; the new one has
        `resharded`, the moves."""
        plan = target_plan(self.plan, program)
        plan.check_feeds()
        moves = _planned_moves(self.plan, plan)
        moves = moves.check_budget(budget)
        new = self._resharded(plan, moves)
        new.steps, new.checkpoint, new.resharded = self.steps, self.checkpoint, moves
        return new

    def preload(self, program) -> bool:
        """Load `program` (as `reshard` takes it) on this session's ranks beside the running one, without state,
        so that `reshard(program)` later only moves the state (a switch's load paid ahead, e.g. before training
        starts); the moves are planned now too. The state and the running program are untouched. Returns False
        if the ranks held the program already (they keep the programs they left, `loaded_programs`)."""
        plan = target_plan(self.plan, program)
        plan.check_feeds()
        _planned_moves(self.plan, plan)  # refused here if the state cannot move there; planned once
        return self._preload(plan)

    def _preload(self, plan: SessionPlan) -> bool:
        """Load `plan`'s program beside the running one (sessions on ranks override it): the simulator holds
        no loaded programs."""
        return False

    @abstractmethod
    def _resharded(self, plan: SessionPlan, moves: Reshard) -> Session:
        """The session of `plan` on this session's devices, its state moved by `moves`."""

    def close(self) -> None:  # noqa: B027 - a default, not abstract: the simulated session holds no ranks
        """Release the session's ranks (sessions that start or join ranks override it)."""

    def lost_state(self) -> str:
        """What is lost when the session's ranks are gone: the steps since the last checkpoint saved or loaded
        (or since the session started), and how to go on."""
        if self.checkpoint is None:
            if not self.steps:
                return "no step had run and no checkpoint was saved: only the initial state is lost"
            return (f"no checkpoint was saved: the state of {_steps(1, self.steps)} since the session started is "
                    "lost (session.save(directory) every few steps keeps it)")
        how, directory, step = self.checkpoint
        where = f"the checkpoint {how} at step {step} in {directory}"
        lost = f"the state of {_steps(step + 1, self.steps)} since {where} is lost" if self.steps > step else \
            f"no step since {where} is lost"
        return f"{lost}: load it in a new session (session.load('{directory}')) to go on from step {step}"

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @abstractmethod
    def _step(self, inputs: dict[int, np.ndarray]):
        """One step on the checked batch (argument index -> global array); the returned results."""

    def _write_blocks(self, directory: Path, jobs: list[dict[int, str]]) -> dict[str, dict]:
        """Write each rank's blocks `jobs[rank]` (argument index -> file); the files' records."""
        raise CheckpointError(f"{type(self).__name__} cannot save checkpoints")

    def _open(self, directory) -> Checkpoint:
        """The checkpoint in `directory`, fitting this program, its files checked (here: every file)."""
        return open_checked(directory, self.plan.state_values())

    def _restore(self, checkpoint: Checkpoint) -> None:
        """Make the (checked) checkpoint's values the state."""
        raise CheckpointError(f"{type(self).__name__} cannot load checkpoints")


_PLANNED: OrderedDict[tuple, Reshard] = OrderedDict()  # the last switches' moves, by both programs' keys
_PLANNED_KEPT = 16


def _planned_moves(old: SessionPlan, new: SessionPlan) -> Reshard:
    """`plan_moves(old, new)`, planned once per pair of programs in this process: a session switching back
    and forth between a few programs plans each switch once (the synthesizer's plans take longer than moving a
    small state). A plan stays correct if the cost model's figures change later, only perhaps not the
    cheapest."""
    key = tuple((program_key(p.graph.to_json(), p.feeds, p.arg_names, RunOptions()), tuple(sorted(p.state)))
                for p in (old, new))
    if key not in _PLANNED:
        _PLANNED[key] = plan_moves(old, new)
        while len(_PLANNED) > _PLANNED_KEPT:
            _PLANNED.popitem(last=False)
    _PLANNED.move_to_end(key)
    return _PLANNED[key]


def _steps(first: int, last: int) -> str:
    return f"step {first}" if first == last else f"steps {first}-{last}"


class SimulatedSession(Session):
    """The session on the in-process simulator: the state as global arrays, every device simulated."""

    def __init__(self, plan: SessionPlan, simulator: Simulator):
        super().__init__(plan)
        plan.check_feeds()  # global arrays need no matching types, but a program must run alike everywhere
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

    def _write_blocks(self, directory, jobs):
        return {file: write_block(directory, file, self.plan.block(self.state[arg], arg, rank),
                                  self.plan.local_shape(arg))
                for rank, job in enumerate(jobs) for arg, file in job.items()}

    def _restore(self, checkpoint):
        self.state = {i: checkpoint.read(name) for i, (name, _) in self.plan.restore_job(0).items()}

    def _resharded(self, plan, moves):  # global values: a move changes their type only, the arrays pass as they are
        simulator = self.simulator if plan.graph is self.plan.graph else Simulator(plan.graph, backend="native")
        return SimulatedSession(replace(plan, state={m.new: self.state.pop(m.old) for m in moves.moves}), simulator)


class LaunchedSession(Session):
    """The session on a job of `ranks` MPI ranks: the state stays on the ranks. The job is started for it, or
    lent by `borrow` (a kept job, `rank_pool.borrow`; None: none to lend) and handed back with `give_back` when the
    session closes or is dropped, the ranks up for the next user (its `load` replaces this program)."""

    def __init__(self, plan: SessionPlan, ranks: int, *, mpiexec: str | None = None, timeout: float = 600,
                 oversubscribe: bool = False, borrow: Callable[[], RankJob | None] | None = None,
                 give_back: Callable[[RankJob], None] | None = None, options: RunOptions | None = None):
        super().__init__(plan)
        plan.check_feeds()
        self.options = options if options is not None else RunOptions.chosen()
        lent = borrow() if borrow is not None else None  # after every check that can refuse the session
        self.job = lent if lent is not None else RankJob(ranks, mpiexec=mpiexec, timeout=timeout)
        # A lent job goes back when the session closes, or when it is dropped unclosed (nobody can use it then).
        self._give_back = weakref.finalize(self, give_back, lent) if lent is not None and give_back else None
        self._sent_before = replace(self.job.sent)  # a lent job has sent other programs' bytes before
        self._moved_to: str | None = None  # why this session serves no more (it was resharded), if so
        self.move_seconds = 0.0  # of a session made by `reshard`: the slowest rank's time moving the state
        self.kept_program = False  # of a session made by `reshard`: its program was still loaded on the ranks
        self.move_peak_bytes = 0  # of a session made by `reshard`: the most a rank's resident peak grew moving
        try:
            load_program(self.job, plan, oversubscribe=oversubscribe, options=self.options)
            self.job.request([("put", {i: plan.block(a, i, r) for i, a in plan.state.items()}) for r in range(ranks)])
        except BaseException:
            self.job.close(graceful=False)
            if self._give_back is not None:
                self._give_back()  # an ended job: dropped from the pool
            raise

    @property
    def sent(self) -> Sent:
        """What the session sent to the ranks so far (array bytes and bytes on the wire)."""
        return Sent(self.job.sent.payload - self._sent_before.payload,
                    self.job.sent.message - self._sent_before.message)

    def _step(self, inputs):
        ranks = self.job.ranks
        replies = self._request([("step", {i: self.plan.block(a, i, r) for i, a in inputs.items()})
                                 for r in range(ranks)])
        return self.plan.outputs(replies)

    def state_dict(self):
        return self.plan.state_from(self._request([("get", job) for job in self.plan.state_jobs()]))

    def _write_blocks(self, directory, jobs):
        records = {}
        for written in self._request([("save", str(directory), job) for job in jobs]):
            records.update(written)
        return records

    def _open(self, directory) -> Checkpoint:
        """The manifest read here and fitting this program; the ranks check the files they read, on their hosts
        (`checkpoint_hosts.read_across`), before any block is replaced."""
        return open_fitting(directory, self.plan.state_values())

    def _restore(self, checkpoint):
        self._request([("restore", checkpoint, self.plan.restore_job(r)) for r in range(self.job.ranks)])

    def _resharded(self, plan, moves):
        """The ranks move the state and load `plan`'s program (one request, `load_program`); the new session
        takes the job over (and gives a lent job back when it closes), this one is done with."""
        if self._moved_to:
            raise RunError(self._moved_to)
        new = object.__new__(LaunchedSession)
        Session.__init__(new, plan)
        new.job, new._sent_before, new._moved_to, new._give_back = self.job, self._sent_before, None, None
        new.options = self.options
        if self._give_back is not None:  # the lent job goes back when the new session closes or is dropped
            _, give_back, args, _ = self._give_back.detach()
            new._give_back = weakref.finalize(new, give_back, *args)
        self._give_back, self._moved_to = None, "this session was resharded (session.reshard): use the one it returned"
        loaded = new._request_as(lambda: load_program(new.job, plan, moves=moves, options=new.options))
        new.move_seconds, new.kept_program = max(loaded.move_seconds), loaded.kept
        new.move_peak_bytes = max(loaded.move_peak_bytes)
        return new

    def _preload(self, plan):
        if self._moved_to:
            raise RunError(self._moved_to)
        return self._request_as(lambda: preload_program(self.job, plan, options=self.options))

    def _request_as(self, work):
        """`work()` (requests to the job), its RunError saying what state is lost when the job has ended."""
        try:
            return work()
        except RunError as exc:
            if self.job.healthy:
                raise
            raise RunError(f"{exc}\n{self.lost_state()}") from None

    def _request(self, messages: list[tuple]) -> list:
        """`job.request`; when the job has ended (a rank died, hung or failed), its RunError says what state
        is lost (`lost_state`). A request the ranks refused (a step that failed on its data) leaves the job up
        and the state as it was: that error passes as it is."""
        if self._moved_to:
            raise RunError(self._moved_to)
        return self._request_as(lambda: self.job.request(messages))

    def close(self):
        if self._moved_to:
            return
        if self._give_back is None:
            self.job.close()
        else:
            self._give_back()  # once: a finalizer runs at most once


__all__ = ["LaunchedSession", "Session", "SessionPlan", "SimulatedSession"]
