"""Runs under mpiexec: the collective kind of test/unit/core/extra_collective.py (registered in that one place,
as the package's own are) on real ranks. First the kernel graph of `--graph` (the row sums whose all_reduce it
replaces) by the rank executor, from `--input`; then the step alone on random blocks (several dtypes, shapes,
blocking and nonblocking), each rank's block compared bit for bit with the simulator's. Rank 0 prints one JSON
line: the cases, the failures, the assembled result of the graph and the events of its run's timeline."""

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).parents[1] / "unit" / "core"))
from extra_collective import GatherSum, register_everywhere

from slicer.lowering import KernelGraph
from slicer.redistribution import DistType, Mesh
from slicer.redistribution.layout import Layout
from slicer.redistribution.numpy_semantics import initial_blocks, run_step
from slicer.redistribution.steps import apply_rule, step_with_type
from slicer.runtime.collectives.plan_executor import MeshExecutor
from slicer.runtime.execution.executor import RankExecutor
from slicer.runtime.execution.timings import Timings
from slicer.runtime.simulation.simulator import assemble
from slicer.viz import chrome_trace


def run_graph(comm, graph: KernelGraph, array: np.ndarray) -> tuple[list, list] | None:
    """The graph on this rank; on rank 0 the assembled result and the names of the events of the run's timeline
    (`slicer.viz.chrome_trace`)."""
    rank = comm.Get_rank()
    block = initial_blocks(graph.mesh, graph.values[graph.args[0]].dist, array)[rank]
    executor = RankExecutor(graph, comm)
    try:
        [result], events = executor.run([block])
    finally:
        executor.close()
    blocks, timelines = comm.gather(result, root=0), comm.gather(events, root=0)
    if rank:
        return None
    origin = min(e.start for events in timelines for e in events)  # the run's start, as the launcher's timings
    shifted = tuple(tuple(replace(e, start=e.start - origin, end=e.end - origin) for e in events)
                    for events in timelines)
    trace = chrome_trace(Timings(0.0, (), comm.Get_size(), 1, events=shifted), mesh=graph.mesh)
    return (assemble(graph.mesh, graph.result_dists[0], blocks, "the result").tolist(),
            sorted({e["name"] for e in trace["traceEvents"] if e.get("ph") == "X"}))


def step_cases(comm, rng) -> tuple[int, list]:
    """GatherSum on random partial blocks, against the simulator's step."""
    mesh = Mesh(x=comm.Get_size())
    ex = MeshExecutor(mesh, comm)
    count, failures = 0, []
    for dtype in (np.float32, np.float64, np.float16, np.int32):
        for shape in ((7,), (5, 9), (300, 129)):
            before = DistType.of(mesh, shape, tuple(() for _ in shape), ("x",))
            step = GatherSum(("x",), before)
            step = step_with_type(step, apply_rule(step, before, mesh))
            blocks = [rng.standard_normal(shape).astype(dtype) for _ in range(mesh.device_count)]
            expected = run_step(Layout.get(mesh, shape), step, blocks)[comm.Get_rank()]
            mine = blocks[comm.Get_rank()]
            for how, got in (("blocking", ex.step(step, before, mine)),
                             ("started", ex.start(step, before, mine).wait())):
                count += 1
                if got.dtype != expected.dtype or not np.array_equal(got, expected):
                    failures.append(f"{np.dtype(dtype).name}{list(shape)} {how}")
    ex.close()
    return count, failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--graph", required=True)
    ap.add_argument("--input", required=True)
    args = ap.parse_args()
    register_everywhere()
    comm = MPI.COMM_WORLD
    ran = run_graph(comm, KernelGraph.from_json(Path(args.graph).read_text()), np.load(args.input))
    count, failures = step_cases(comm, np.random.default_rng(7))  # the same blocks on every rank
    every = comm.gather(failures, root=0)
    if comm.Get_rank() == 0:
        result, timeline = ran
        print(json.dumps({"cases": count, "failures": [f for fs in every for f in fs], "result": result,
                          "timeline": timeline}))


if __name__ == "__main__":
    main()
