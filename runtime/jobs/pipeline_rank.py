"""A rank's stage of a pipelined program on a job that stays up (`rank_server`'s "pipeline" requests).

The driver (`slicer.pipelining.pipeline_session`) loads the pipelined program once: the plan (the mesh, the
pipeline axis, each stage's instructions, `mpmd.instructions`, which callee each program is), each stage
program's kernel graph and kernels (by cache key, `kernel_transfer`) and the initial values of the state and
the constants each stage reads. Each rank plays the device whose pipeline coordinate is its stage: it keeps its
blocks of its stage's values, runs its stage's programs over the devices of its stage (a communicator per stage,
on the mesh's other axes) and sends to and receives from the ranks at the other stages' coordinates with its
own other coordinates. A step sends only the step's values (micro-batches, hyperparameters); the results named
like an argument replace its blocks on the rank. The state is read back by name (`blocks`), saved and restored
as a checkpoint's blocks (`runtime.state.checkpoint_hosts`: each rank its own stage's blocks), and `timeline`
gives the last step's calls and how much the rank's resident peak grew during the steps.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from slicer.core.errors import InternalError, RunError
from slicer.core.mesh import Mesh
from slicer.lowering import KernelGraph

from ..execution.blocks import rank_slices, take_block
from ..execution.executor import RankExecutor
from ..execution.pipeline_exec import MpiTransport, run_mpi
from ..state.checkpoint_hosts import read_across, write_here
from .heap import reset_resident_peak, resident_bytes
from .kernel_transfer import local_sources


def placement(stage: dict) -> tuple[dict[int, tuple[str, int]], dict[int, tuple[str, int]]]:
    """For each value id a call of `stage` reads, (callee, argument position) of its first reader; for each call
    result, (callee, result position): where its distributed type comes from."""
    reads: dict[int, tuple[str, int]] = {}
    writes: dict[int, tuple[str, int]] = {}
    for ins in stage["instructions"]:
        if ins["op"] == "call":
            for position, value in enumerate(ins["operands"]):
                reads.setdefault(value, (ins["callee"], position))
            for position, value in enumerate(ins["results"]):
                writes[value] = (ins["callee"], position)
    return reads, writes


def arg_dist(stage: dict, graphs: Mapping[str, KernelGraph], name: str):
    """The distributed type in which `stage` reads its argument `name` (its first reader's), or None if no
    program reads it."""
    reads, _ = placement(stage)
    position = stage["args"].index(name)
    if position not in reads:
        return None
    callee, at = reads[position]
    return graphs[callee].values[graphs[callee].args[at]].dist


def feed_problem(stage: dict, graphs: Mapping[str, KernelGraph]) -> str | None:
    """What is wrong when a result of `stage` named like one of its arguments is laid out unlike it (its blocks
    then cannot replace the argument's), or None."""
    reads, writes = placement(stage)
    returned = stage["instructions"][-1]["operands"]
    for name, value in zip(stage["results"], returned):
        if name == "loss" or name not in stage["args"] or stage["args"].index(name) not in reads:
            continue
        (rc, rp), (wc, wp) = reads[stage["args"].index(name)], writes[value]
        if graphs[rc].values[graphs[rc].args[rp]].dist != graphs[wc].result_dists[wp]:
            return (f"stage {stage['index']}: result {name} is laid out unlike its argument; tile the result like "
                    "the argument")
    return None


class PipelineRank:
    """This rank's stage of a pipelined program: its programs, its blocks, its peers (module docstring)."""

    def __init__(self, plan: dict, graphs: dict[str, str], sources: dict[str, dict], received, comm):
        self.mesh = Mesh({a: s for a, s in plan["mesh"]})
        axis = self.mesh.axis_index(plan["pipeline_axis"])
        self.comm, rank = comm, comm.Get_rank()
        coords = list(self.mesh.coords(rank))
        self.index = coords[axis]
        self.stage = plan["stages"][self.index]
        self.group = comm.Split(color=self.index, key=rank)
        self.sub_rank = self.group.Get_rank()
        peers = [self.mesh.rank(coords[:axis] + [s] + coords[axis + 1:])
                 for s in range(self.mesh.size(plan["pipeline_axis"]))]
        callees = sorted({i["callee"] for i in self.stage["instructions"] if i["op"] == "call"})
        self.graphs = {c: KernelGraph.from_json(graphs[c]) for c in callees}
        self.executors = {c: RankExecutor(self.graphs[c], self.group, kernel_sources=local_sources(
            self.graphs[c], sources[c], received)) for c in callees}
        reads, _ = placement(self.stage)
        for ins in self.stage["instructions"]:  # received values and zeros: shaped as their first reader takes them
            if ins["op"] in ("recv", "zeros") and ins["result"] in reads:
                callee, position = reads[ins["result"]]
                graph = self.graphs[callee]
                ins["local_shape"] = list(graph.values[graph.args[position]].local_shape)
        self.transport = MpiTransport(comm, peers)
        self.resident: dict[str, np.ndarray] = {}  # name -> this rank's block of a value kept between steps
        self.events: list = []
        self.steps = 0
        self.before = 0  # resident bytes before the first step (its peak reset then)

    def dist(self, name: str):
        return arg_dist(self.stage, self.graphs, name)

    def block(self, name: str, array: np.ndarray) -> np.ndarray:
        """This rank's block of its stage's argument `name` from its global value."""
        dist = self.dist(name)
        array = np.asarray(array)
        return array if dist is None else take_block(array, dist, self.mesh_of_stage(), self.sub_rank)

    def mesh_of_stage(self) -> Mesh:
        return next(iter(self.graphs.values())).mesh

    def put(self, values: Mapping[str, np.ndarray]) -> None:
        """Keep this rank's blocks of the global `values` its stage reads (the others are not its stage's)."""
        self.resident.update({n: self.block(n, v) for n, v in values.items() if n in self.stage["args"]})

    def step(self, values: Mapping[str, np.ndarray]) -> float | None:
        """One step on the step's global `values` (with the resident ones); the loss, if this stage has it."""
        missing = [n for n in self.stage["args"] if n not in self.resident and n not in values]
        if missing:
            raise InternalError(f"stage {self.index}: no value for argument(s) {missing}")
        args = [self.block(n, values[n]) if n in values else self.resident[n] for n in self.stage["args"]]
        events: list = []
        self.comm.Barrier()
        if not self.steps:
            reset_resident_peak()
            self.before = resident_bytes()[0]
        results = run_mpi(self.stage["instructions"], args, self._call, self.transport, self.index, events)
        loss = None
        for name, value in zip(self.stage["results"], results):
            if name == "loss":
                loss = float(np.asarray(value))
            elif name in self.stage["args"]:
                self.resident[name] = value
            else:
                raise RunError(f"stage {self.index}: result {name} replaces no argument")
        self.events, self.steps = events, self.steps + 1
        return loss

    def _call(self, callee: str, arrays):
        return self.executors[callee].run(list(arrays))[0]

    def blocks(self, names) -> dict[str, np.ndarray]:
        """This rank's blocks of the state values `names` (of its stage)."""
        return {n: self.resident[n] for n in names}

    def save(self, directory: str, files: Mapping[str, str]) -> dict:
        """Write this rank's blocks (state name -> checkpoint file) into `directory`; their records."""
        return write_here(directory, {file: (self.resident[name], self.resident[name].shape)
                                      for name, file in files.items()})

    def restore(self, checkpoint, names) -> None:
        """Replace this rank's blocks of the state `names` by the checkpoint's (collective over every rank)."""
        names = list(names)
        wanted = {i: (n, rank_slices(self.mesh_of_stage(), self.dist(n), self.sub_rank)) for i, n in enumerate(names)}
        read = read_across(checkpoint, self.comm, wanted)
        for i, name in enumerate(names):
            self.resident[name] = read[i].reshape(self.resident[name].shape)

    def timeline(self) -> tuple[int, list, int]:
        """(this rank's stage, the last step's calls (callee, start, end, cpu seconds), bytes the resident peak
        grew by since the first step began: beyond the state and kernels held before it)."""
        return self.index, self.events, resident_bytes()[1] - self.before

    def close(self) -> None:
        for executor in self.executors.values():
            executor.close()
        self.group.Free()


class PipelineHolder:
    """The pipelined program a rank serves, if any (one at a time)."""

    def __init__(self):
        self.running: PipelineRank | None = None

    def answer(self, request: tuple, comm):
        """This rank's reply to ("pipeline", what, ...)."""
        what, args = request[1], request[2:]
        if what == "load":
            self.close()
            plan, graphs, sources, received = args
            self.running = PipelineRank(plan, graphs, sources, received, comm)
            return self.running.index
        if what == "close":
            return self.close()
        if self.running is None:
            raise InternalError(f"pipeline request {what!r} before a pipelined program was loaded")
        if what == "put":
            return self.running.put(args[0])
        if what == "step":
            return self.running.step(args[0])
        if what == "get":
            return self.running.blocks(args[0])
        if what == "save":
            return self.running.save(*args)
        if what == "restore":
            return self.running.restore(*args)
        if what == "timeline":
            return self.running.timeline()
        raise InternalError(f"unknown pipeline request {what!r}")

    def close(self) -> None:
        if self.running is not None:
            self.running.close()
            self.running = None


__all__ = ["PipelineHolder", "PipelineRank", "arg_dist", "feed_problem", "placement"]
