"""A pipelined training job on MPI ranks: `python -m slicer.runtime.jobs.pipeline_job JOB_DIR` under mpiexec.

JOB_DIR (written by `write_pipeline_job`) holds `plan.json` (the mesh, the pipeline axis, each stage's
instructions, `mpmd.instructions`, which callee each program is), `graph_<callee>.json` and
`kernels_<callee>.json` (each stage program's kernel graph and where its kernels are), `state.npz` (every
parameter, buffer and optimizer state value, global) and `steps.npz` (each step's batch tensors and
hyperparameters). Each rank plays the device whose pipeline coordinate is its stage: it runs its stage's
programs over the devices of its stage (a communicator per stage, on the mesh's other axes) and sends to and
receives from the ranks at the other stages' coordinates with its own other coordinates. After the steps,
rank 0 writes `losses.npy` and `final.npz` (the state, assembled). Any failing rank aborts the job.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from slicer.core.errors import RunError
from slicer.core.mesh import Mesh
from slicer.lowering import KernelGraph

from ..execution.blocks import take_block
from ..execution.executor import RankExecutor, kernel_sources, load_kernels
from ..execution.pipeline_exec import MpiTransport, run_mpi
from ..simulation.simulator import assemble
from .heap import keep_freed_memory
from .mpiexec import run_spmd
from .rank import run_rank

PLAN_FILE = "plan.json"
TIMELINE_FILE = "timeline.json"  # the last step's calls per rank: [[stage, [[callee, start, end], ...]], ...]


def write_pipeline_job(job_dir: Path, plan: dict, graphs: dict[str, KernelGraph], state: dict[str, np.ndarray],
                       steps: list[dict[str, np.ndarray]]) -> None:
    """Write the job `run_pipeline_job` reads (module docstring); the kernels compiled once here."""
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / PLAN_FILE).write_text(json.dumps(plan))
    for callee, graph in graphs.items():
        (job_dir / f"graph_{callee}.json").write_text(graph.to_json())
        kernels, backend = load_kernels(graph)
        (job_dir / f"kernels_{callee}.json").write_text(json.dumps(kernel_sources(kernels, backend)))
    _save(job_dir / "state.npz", state)
    _save(job_dir / "steps.npz", {f"{i}|{k}": v for i, s in enumerate(steps) for k, v in s.items()})


def _save(path: Path, arrays: dict) -> None:
    """`arrays` by name into the `.npz` file `path`."""
    save: Any = np.savez  # its stubs read the keyword arrays as its `allow_pickle` flag
    save(path, **arrays)


def _placement(stage: dict, graphs: dict[str, KernelGraph]):
    """For each value id a call reads, (callee, argument position); for each call result, (callee, result
    position): where its distributed type comes from."""
    reads: dict[int, tuple[str, int]] = {}
    writes: dict[int, tuple[str, int]] = {}
    for ins in stage["instructions"]:
        if ins["op"] == "call":
            for position, value in enumerate(ins["operands"]):
                reads.setdefault(value, (ins["callee"], position))
            for position, value in enumerate(ins["results"]):
                writes[value] = (ins["callee"], position)
    return reads, writes


def run_pipeline_job(job_dir: Path, comm) -> None:
    """This rank's part of the job (module docstring)."""
    plan = json.loads((job_dir / PLAN_FILE).read_text())
    mesh = Mesh({a: s for a, s in plan["mesh"]})
    axis = mesh.axis_index(plan["pipeline_axis"])
    rank = comm.Get_rank()
    coords = list(mesh.coords(rank))
    index = coords[axis]
    stage = plan["stages"][index]
    group = comm.Split(color=index, key=rank)
    sub_rank = group.Get_rank()
    peers = [mesh.rank(coords[:axis] + [s] + coords[axis + 1:]) for s in range(mesh.size(plan["pipeline_axis"]))]
    callees = sorted({i["callee"] for i in stage["instructions"] if i["op"] == "call"})
    graphs = {c: KernelGraph.from_json((job_dir / f"graph_{c}.json").read_text()) for c in callees}
    executors = {c: RankExecutor(graphs[c], group, kernel_sources=json.loads(
        (job_dir / f"kernels_{c}.json").read_text())) for c in callees}
    reads, writes = _placement(stage, graphs)
    for ins in stage["instructions"]:
        if ins["op"] == "recv" and ins["result"] in reads:
            callee, position = reads[ins["result"]]
            ins["local_shape"] = list(graphs[callee].values[graphs[callee].args[position]].local_shape)
    state = dict(np.load(job_dir / "state.npz"))
    saved = np.load(job_dir / "steps.npz")
    steps: dict[int, dict] = {}
    for key in saved.files:
        number, name = key.split("|", 1)
        steps.setdefault(int(number), {})[name] = saved[key]
    transport = MpiTransport(comm, peers)

    def call(callee, arrays):
        return executors[callee].run(list(arrays))[0]

    losses: list[float] = []
    resident: dict[str, np.ndarray] = {}  # name -> this rank's block of a result that is the next step's argument
    returned = stage["instructions"][-1]["operands"]
    for number in range(len(steps)):
        values = {**state, **steps[number]}
        args = _stage_args(stage, values, resident, reads, graphs, sub_rank)
        events: list = []
        comm.Barrier()
        results = run_mpi(stage["instructions"], args, call, transport, index, events)
        for position, (name, value) in enumerate(zip(stage["results"], returned)):
            if name == "loss":
                losses.append(float(np.asarray(results[position])))  # replicated: every rank has it
            elif name in stage["args"] and _same_dist(stage, graphs, reads, writes, name, value):
                resident[name] = results[position]
            else:
                raise RunError(f"stage {index}: result {name} is laid out unlike its argument; tile the result "
                               "like the argument")
    final = {}
    for name, value in zip(stage["results"], returned):
        if name == "loss":
            continue
        callee, at = writes[value]
        graph = graphs[callee]
        gathered = group.gather(resident[name], root=0)
        if sub_rank == 0:
            final[name] = assemble(graph.mesh, graph.result_dists[at], gathered, name, graph.result_shape(at))
    for executor in executors.values():
        executor.close()
    timelines = comm.gather((index, events), root=0)  # the last step's calls, on every rank
    finals = comm.gather((final, losses) if sub_rank == 0 else None, root=0)
    if rank == 0:
        merged: dict[str, np.ndarray] = {}
        all_losses: list[float] = []
        for part in finals:
            if part is not None:
                merged.update(part[0])
                all_losses = part[1] or all_losses
        np.save(job_dir / "losses.npy", np.asarray(all_losses))
        (job_dir / TIMELINE_FILE).write_text(json.dumps(timelines))
        _save(job_dir / "final.npz", merged)


def _stage_args(stage: dict, values: dict, resident: dict, reads: dict, graphs: dict, sub_rank: int) -> list:
    """This rank's blocks of the stage function's arguments: the resident ones, else taken from the global
    values in the layout of the first program that reads them."""
    args = []
    for position, name in enumerate(stage["args"]):
        array = values[name]
        if name in resident:
            array = resident[name]
        elif position in reads:
            callee, at = reads[position]
            graph = graphs[callee]
            array = take_block(np.asarray(array), graph.values[graph.args[at]].dist, graph.mesh, sub_rank)
        args.append(array)
    return args


def _same_dist(stage: dict, graphs: dict, reads: dict, writes: dict, name: str, value: int) -> bool:
    """Does the result `name` (value id `value`) have the layout its argument of the same name is read in?"""
    arg = stage["args"].index(name)
    if arg not in reads:
        return True
    (rc, rp), (wc, wp) = reads[arg], writes[value]
    return graphs[rc].values[graphs[rc].args[rp]].dist == graphs[wc].result_dists[wp]


def launch_pipeline(job_dir: Path, ranks: int, *, timeout: float = 600, mpiexec: str | None = None):
    """Run the job written in `job_dir` on `ranks` ranks: (losses, final state by name, the last step's
    timeline: per rank, its stage and its calls as (callee, start, end) seconds of a clock all ranks share)."""
    done = run_spmd(ranks, [sys.executable, "-m", "slicer.runtime.jobs.pipeline_job", str(job_dir)], timeout=timeout,
                    mpiexec=mpiexec)
    if done.returncode != 0:
        raise RunError(f"the pipelined job failed on {ranks} ranks (exit {done.returncode}):\n"
                       f"{done.stderr.strip()[-4000:]}")
    final = dict(np.load(job_dir / "final.npz"))
    timeline = [(stage, [tuple(e) for e in events])
                for stage, events in json.loads((job_dir / TIMELINE_FILE).read_text())]
    return [float(x) for x in np.load(job_dir / "losses.npy")], final, timeline


def main(argv: list[str] | None = None) -> None:
    job_dir = Path((argv or sys.argv[1:])[0])
    keep_freed_memory()
    run_rank(lambda comm: run_pipeline_job(job_dir, comm))


if __name__ == "__main__":
    main()
