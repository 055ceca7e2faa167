"""Sessions of a pipelined program (`PipelineProgram.session`): step after step, the state kept where it runs.

    with prog.session(ranks=2) as s:
        for batch in batches:
            loss = s.step(*batch)
        s.save("ckpt")                          # loads under any other strategy (data parallel, ...) and back

`LocalPipelineSession` (ranks=None) runs every stage in this process (the simulator, the transfers in
memory); `LaunchedPipelineSession` loads the stages once on a job of ranks (`runtime.jobs.rank_job`, the ranks
answering through `runtime.jobs.pipeline_rank`) and then sends each step's micro-batches and hyperparameters
only. The state is the stages' parameters, buffers and optimizer state, by the training step's names; a
checkpoint holds every value's blocks as its stage lays it out on the stage's devices (the mesh with the
pipeline axis at 1), each written by the rank that holds it, so it loads like any other session's
(`runtime.state.checkpoint`).
"""

from __future__ import annotations

import weakref
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from slicer.core.errors import RunError
from slicer.lowering.cache import host_cpu
from slicer.runtime import Simulator
from slicer.runtime.execution.executor import kernel_sources, load_kernels
from slicer.runtime.execution.pipeline_exec import run_local
from slicer.runtime.jobs.kernel_transfer import cache_keys, libraries
from slicer.runtime.jobs.pipeline_rank import arg_dist, feed_problem
from slicer.runtime.jobs.rank_job import RankJob
from slicer.runtime.jobs.rank_pool import borrow, give_back
from slicer.runtime.state.checkpoint import (
    StateValue,
    begin,
    block_file,
    open_checked,
    write_block,
    write_manifest,
    writers,
)
from slicer.runtime.state.checkpoint_hosts import open_fitting


class PipelineSession(ABC):
    """What every pipelined session does (module docstring): `step`, `state_dict`, `save`, `load`, `steps`."""

    def __init__(self, prog):
        self.prog = prog
        self.plan = prog.plan()
        self.graphs = {name: program.graph for name, program in prog.programs.items()}
        for stage in self.plan["stages"]:
            problem = feed_problem(stage, self.graphs)
            if problem:
                raise RunError(problem)
        self.mesh = next(iter(self.graphs.values())).mesh  # a stage's devices: the pipeline axis at 1
        self.steps = 0
        names, initial = prog.state_names(), prog.initial_state()
        self.values: list[tuple[int, StateValue]] = []  # (the first stage holding it, value) per state value
        self.held: dict[int, list[str]] = {}  # stage -> the state it holds (a step count: every stage its own)
        for stage in self.plan["stages"]:
            self.held[stage["index"]] = held = [n for n in stage["args"] if n in names]
            for name in held:
                dist = arg_dist(stage, self.graphs, name)
                if dist is None:
                    raise RunError(f"stage {stage['index']}: its state {name} is read by none of its programs")
                if all(name != v.name for _, v in self.values):
                    self.values.append((stage["index"], StateValue(len(self.values), name,
                                                                   np.asarray(initial[name]).dtype, dist)))

    def step(self, *batch, **hyperparameters) -> float:
        """One step on `batch` (the step's batch tensors); the loss. `hyperparameters` (e.g. `lr=1e-3`) hold for
        this step only."""
        loss = self._step(self.prog.step_values(self.steps, batch, hyperparameters))
        self.steps += 1
        return loss

    def placed(self) -> dict[str, dict[int, tuple]]:
        """Per state name, the ranks that hold its distinct blocks (world ranks of its stage) and their slices."""
        axis = self.prog.mesh.axis_index(self.prog.pipeline.axis)
        world = {s: [r for r in range(self.prog.mesh.device_count) if self.prog.mesh.coords(r)[axis] == s]
                 for s in range(self.prog.mesh.size(self.prog.pipeline.axis))}
        return {v.name: {world[s][sub]: slices for sub, slices in writers(self.mesh, v).items()}
                for s, v in self.values}

    def save(self, directory) -> Path:
        """Write a checkpoint of the state (module docstring) to `directory`."""
        directory = begin(directory)
        placed = self.placed()
        jobs: dict[int, dict[str, str]] = {}
        for value in (v for _, v in self.values):
            for rank in placed[value.name]:
                jobs.setdefault(rank, {})[value.name] = block_file(value, rank)
        records = self._write(directory, jobs)
        write_manifest(directory, self.mesh, [v for _, v in self.values], self.steps, records, placed)
        return directory

    def load(self, directory) -> None:
        """Replace the state by the checkpoint in `directory` (saved under any strategy); the step count is the
        checkpoint's."""
        self.steps = self._restore(directory)

    def close(self) -> None:  # noqa: B027 - a default, not abstract: the local session holds no ranks
        """Release the session's ranks."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @abstractmethod
    def _step(self, values: dict) -> float:
        """One step on the step's global values; the loss."""

    @abstractmethod
    def _write(self, directory: Path, jobs: dict[int, dict[str, str]]) -> dict:
        """Write each rank's blocks `jobs[rank]` (state name -> file); the files' records."""

    @abstractmethod
    def _restore(self, directory) -> int:
        """Replace the state by the checkpoint in `directory`; its step count."""

    @abstractmethod
    def state_dict(self) -> dict[str, np.ndarray]:
        """The state as global numpy arrays, by name."""


class LocalPipelineSession(PipelineSession):
    """Every stage in this process: the state as global arrays."""

    def __init__(self, prog):
        super().__init__(prog)
        self.state = prog.initial_state()
        self.simulators = {name: Simulator(graph, backend="native") for name, graph in self.graphs.items()}

    def _call(self, stage, callee, arrays):
        out = self.simulators[callee](*arrays)
        return list(out) if isinstance(out, tuple) else [out]

    def _step(self, values):
        merged = {**self.state, **values}
        loss = float("nan")
        results = run_local(self.prog.stages, [[merged[n] for n in s.args] for s in self.prog.stages], self._call)
        for stage, outs in zip(self.prog.stages, results):
            for name, value in zip(stage.results, outs):
                if name == "loss":
                    loss = float(value)
                else:
                    self.state[name] = value
        return loss

    def state_dict(self):
        return {v.name: np.array(self.state[v.name]) for _, v in self.values}

    def _write(self, directory, jobs):
        placed = self.placed()
        return {file: write_block(directory, file, self.state[name][placed[name][rank]],
                                  [s.stop - s.start for s in placed[name][rank]])
                for rank, files in jobs.items() for name, file in files.items()}

    def _restore(self, directory):
        checkpoint = open_checked(directory, [v for _, v in self.values])
        self.state.update({v.name: checkpoint.read(v.name) for _, v in self.values})
        return checkpoint.step


class LaunchedPipelineSession(PipelineSession):
    """The stages on a job of MPI ranks (`runtime.jobs.pipeline_rank`), the state kept there."""

    def __init__(self, prog, *, mpiexec: str | None = None, timeout: float = 600):
        super().__init__(prog)
        ranks = prog.mesh.device_count
        axis = prog.mesh.axis_index(prog.pipeline.axis)
        self.stage_of = [prog.mesh.coords(r)[axis] for r in range(ranks)]
        lent = borrow(ranks, mpiexec, timeout)  # the kept job (SLICER_KEEP_RANKS=1), if no other session holds it
        self.job = lent if lent is not None else RankJob(ranks, mpiexec=mpiexec, timeout=timeout)
        self._give_back = weakref.finalize(self, give_back, lent) if lent is not None else None
        try:
            self._load()
        except BaseException:
            self.job.close(graceful=False)
            if self._give_back is not None:
                self._give_back()  # an ended job: dropped from the pool
            raise

    def _load(self) -> None:
        """The stages' programs loaded on the ranks (kernels by cache key, `kernel_transfer`), then the initial
        values each stage reads."""
        sources = {name: kernel_sources(*load_kernels(graph)) for name, graph in self.graphs.items()}
        keys = sorted({key for s in sources.values() for key in cache_keys(s)})
        missing = self.job.request([("kernels", host_cpu(), keys)] * self.job.ranks)
        found = libraries(sorted({key for lacking in missing if lacking for key in lacking}))
        stages = self.plan["stages"]
        messages = []
        for rank, lacking in enumerate(missing):
            callees = {i["callee"] for i in stages[self.stage_of[rank]]["instructions"] if i["op"] == "call"}
            messages.append(("pipeline", "load", self.plan, {c: self.graphs[c].to_json() for c in callees},
                             {c: sources[c] for c in callees}, None if lacking is None else
                             {key: found[key] for key in lacking}))
        self.job.request(messages)
        self.job.request(self._per_stage("put", self.prog.initial_state()))

    def _per_stage(self, what: str, values: dict) -> list[tuple]:
        """A request to every rank with the `values` its stage reads."""
        stages = self.plan["stages"]
        return [("pipeline", what, {n: v for n, v in values.items() if n in stages[s]["args"]})
                for s in self.stage_of]

    def _step(self, values):
        losses = [loss for loss in self.job.request(self._per_stage("step", values)) if loss is not None]
        return losses[0]

    def _names(self, rank: int, placed: dict) -> list[str]:
        return [v.name for s, v in self.values if rank in placed[v.name]]

    def state_dict(self):
        placed = self.placed()
        replies = self.job.request([("pipeline", "get", self._names(r, placed)) for r in range(self.job.ranks)])
        state = {}
        for _, value in self.values:
            whole = np.empty(value.shape, value.dtype)
            for rank, slices in placed[value.name].items():
                whole[slices] = np.reshape(replies[rank][value.name], whole[slices].shape)
            state[value.name] = whole
        return state

    def _write(self, directory, jobs):
        records: dict = {}
        for written in self.job.request([("pipeline", "save", str(directory), jobs.get(r, {}))
                                         for r in range(self.job.ranks)]):
            records.update(written)
        return records

    def _restore(self, directory):
        checkpoint = open_fitting(directory, [v for _, v in self.values])
        self.job.request([("pipeline", "restore", checkpoint, self.held[stage]) for stage in self.stage_of])
        return checkpoint.step

    def timeline(self) -> tuple[list, list]:
        """The last step on the ranks: per rank (stage, [(callee, start, end), ...]) in seconds of a clock the
        ranks share, and per rank the bytes its resident peak grew by since its first step began."""
        replies = self.job.request([("pipeline", "timeline")] * self.job.ranks)
        return [(stage, [tuple(e) for e in events]) for stage, events, _ in replies], [g for _, _, g in replies]

    def close(self) -> None:
        """Release the ranks: the job ends, or a kept one (`rank_pool`) frees the stages and serves on."""
        if self._give_back is None:
            self.job.close()
        elif self._give_back.alive:
            if self.job.healthy:
                self.job.request([("pipeline", "close")] * self.job.ranks)
            self._give_back()


def check_batch(names: Sequence[str], batch: Sequence) -> None:
    if len(batch) != len(names):
        raise RunError(f"the pipelined step takes {len(names)} batch tensor(s) ({', '.join(names)}), got "
                       f"{len(batch)}")


__all__ = ["LaunchedPipelineSession", "LocalPipelineSession", "PipelineSession", "check_batch"]
