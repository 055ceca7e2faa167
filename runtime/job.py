"""One SPMD job as every rank runs it: `python -m slicer.runtime.job JOB_DIR` under mpiexec.

JOB_DIR holds `graph.json` (the kernel graph), `kernels.json` (where the launcher found each compiled kernel,
`executor.kernel_sources`; without it each rank compiles them, as in `runtime.in_job`), `job.json` (inputs: `.npy` paths
or a random seed; `repeat`: timed runs; `overlap`: collectives overlap kernels, default
true, or `SLICER_OVERLAP=0` in the environment) and receives the results: rank 0 assembles
the global results from every rank's blocks into `result<i>.npy` and writes
`timings.json` (`slicer.runtime.timings.Timings`). Each rank
reads or creates only its own block of each input. Any failure on any rank
aborts the whole job with that rank's traceback (runtime.rank).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from slicer.core import environment
from slicer.lowering import KernelGraph, cache_stats

from .blocks import random_block, read_block
from .executor import RankExecutor
from .heap import keep_freed_memory
from .rank import at_step, run_rank
from .simulator import assemble
from .timings import TIMINGS_FILE, Timings, reduce_runs

KERNELS_FILE = "kernels.json"


def write_job(job_dir: Path, graph: KernelGraph, *, inputs=None, seed: int = 0, repeat: int = 1,
              kernel_sources: dict | None = None) -> None:
    """Write the job `run_job` reads into `job_dir`: the graph, the inputs (`.npy` paths, else random from
    `seed`) and the number of timed runs, and where the launcher found the kernels when it did."""
    (job_dir / "graph.json").write_text(graph.to_json())
    if kernel_sources is not None:
        (job_dir / KERNELS_FILE).write_text(json.dumps(kernel_sources))
    (job_dir / "job.json").write_text(json.dumps({"inputs": list(inputs) if inputs else None, "seed": seed,
                                                  "repeat": repeat}))


def rank_inputs(graph: KernelGraph, job: dict, rank: int) -> list[np.ndarray]:
    blocks = []
    for index, name in enumerate(graph.args):
        value = graph.values[name]
        if job.get("inputs"):
            blocks.append(read_block(job["inputs"][index], value.dist, graph.mesh, rank, value.numpy_dtype,
                                     graph.arg_shape(index)))
        else:
            blocks.append(random_block(job["seed"] + index, value.dist, graph.mesh, rank, value.numpy_dtype,
                                       graph.arg_shape(index)))
    return blocks


def run_job(job_dir: Path, comm) -> list[np.ndarray] | None:
    """Run the job on `comm`; returns the global results on rank 0 (None elsewhere).

    After a warm-up run (first calls pay one-time costs: symbol resolution, MPI connections), `repeat` runs
    measure the total time as users see it (the last one's timeline is kept), and `repeat` more with a barrier
    before each collective give the per-step breakdown (waiting for other ranks, pack, transfer, unpack)."""
    graph = KernelGraph.from_json((job_dir / "graph.json").read_text())
    job = json.loads((job_dir / "job.json").read_text())
    repeat = int(job.get("repeat", 1))
    sources_file = job_dir / KERNELS_FILE
    sources = json.loads(sources_file.read_text()) if sources_file.exists() else None
    executor = RankExecutor(graph, comm, overlap=job.get("overlap", environment.value(environment.OVERLAP) != "0"),
                            kernel_sources=sources)
    rank = executor.rank
    at_step(rank, "compiled")
    blocks = rank_inputs(graph, job, rank)
    executor.run(blocks)
    totals, runs = [], []
    at_step(rank, "run")
    for _ in range(repeat):
        comm.Barrier()
        start = time.perf_counter()
        results, events = executor.run(blocks)
        totals.append(time.perf_counter() - start)
        timeline = [replace(e, start=e.start - start, end=e.end - start) for e in events]
    for _ in range(repeat):
        comm.Barrier()
        start = time.perf_counter()
        _, events = executor.run(blocks, timed=True)
        runs.append([replace(e, start=e.start - start, end=e.end - start) for e in events])
    gathered = comm.gather(results, root=0)
    all_runs = comm.gather(runs, root=0)
    all_totals = comm.gather(totals, root=0)
    timelines = comm.gather(timeline, root=0)
    compile_times = comm.gather(executor.compile_seconds, root=0)
    misses = comm.gather(cache_stats().misses, root=0)
    backends = comm.gather(executor.backend, root=0)
    peaks = comm.gather(executor.buffers.peak, root=0)
    executor.close()
    if rank != 0:
        return None
    outputs = []
    for index, (name, dist) in enumerate(zip(graph.results, graph.result_dists)):
        array = assemble(graph.mesh, dist, [gathered[r][index] for r in range(len(gathered))], f"result #{index}",
                         graph.result_shape(index))
        np.save(job_dir / f"result{index}.npy", array)
        outputs.append(array)
    seconds, steps = reduce_runs(all_runs, all_totals)
    timings = Timings(seconds, steps, len(gathered), repeat, max(compile_times), sum(misses),
                      tuple(sorted(set(backends))), tuple(tuple(events) for events in timelines), tuple(peaks))
    (job_dir / TIMINGS_FILE).write_text(timings.to_json())
    return outputs


def main(argv: list[str] | None = None) -> None:
    job_dir = Path((argv or sys.argv[1:])[0])
    keep_freed_memory()
    run_rank(lambda comm: run_job(job_dir, comm))


if __name__ == "__main__":
    main()
