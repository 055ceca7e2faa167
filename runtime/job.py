"""One SPMD job as every rank runs it: `python -m slicer.runtime.job JOB_DIR` under mpiexec.

JOB_DIR holds `graph.json` (the kernel graph), `job.json` (inputs: `.npy` paths or
a random seed) and receives the results: rank 0 assembles the global results from
every rank's blocks into `result<i>.npy` and writes `timings.json`. Each rank
reads or creates only its own block of each input. Any failure on any rank
aborts the whole job with that rank's traceback (runtime.rank).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from slicer.lowering.kernel_graph import KernelGraph

from .blocks import random_block, read_block
from .executor import RankExecutor
from .rank import maybe_kill, run_rank


def rank_inputs(graph: KernelGraph, job: dict, rank: int) -> list[np.ndarray]:
    blocks = []
    for index, name in enumerate(graph.args):
        value = graph.values[name]
        if job.get("inputs"):
            blocks.append(read_block(job["inputs"][index], value.dist, graph.mesh, rank, value.numpy_dtype))
        else:
            blocks.append(random_block(job["seed"] + index, value.dist, graph.mesh, rank, value.numpy_dtype))
    return blocks


def run_job(job_dir: Path, comm) -> list[np.ndarray] | None:
    """Run the job on `comm`; returns the global results on rank 0 (None elsewhere)."""
    from slicer.spmd.simulator import assemble

    graph = KernelGraph.from_json((job_dir / "graph.json").read_text())
    job = json.loads((job_dir / "job.json").read_text())
    executor = RankExecutor(graph, comm)
    rank = executor.rank
    maybe_kill(rank, "compiled")
    blocks = rank_inputs(graph, job, rank)
    executor.run(blocks)  # warm-up: first calls pay one-time costs (symbol resolution, MPI connections)
    comm.Barrier()
    start = time.perf_counter()
    maybe_kill(rank, "run")
    results, timings = executor.run(blocks)
    elapsed = time.perf_counter() - start
    gathered = comm.gather(results, root=0)
    all_timings = comm.gather(timings, root=0)
    compile_times = comm.gather(executor.compile_seconds, root=0)
    from slicer.lowering import cache_stats

    misses = comm.gather(cache_stats().misses, root=0)
    backends = comm.gather(executor.backend, root=0)
    if rank != 0:
        return None
    outputs = []
    for index, (name, dist) in enumerate(zip(graph.results, graph.result_dists)):
        array = assemble(graph.mesh, dist, [gathered[r][index] for r in range(len(gathered))], f"result #{index}")
        np.save(job_dir / f"result{index}.npy", array)
        outputs.append(array)
    steps = [(label, max(t[i][1] for t in all_timings)) for i, (label, _) in enumerate(all_timings[0])]
    (job_dir / "timings.json").write_text(json.dumps({
        "seconds": elapsed, "steps": steps, "compile_seconds_max": max(compile_times), "ranks": len(gathered),
        "kernel_cache_misses": sum(misses), "kernel_backends": sorted(set(backends))}))
    return outputs


def main(argv: list[str] | None = None) -> None:
    job_dir = Path((argv or sys.argv[1:])[0])
    run_rank(lambda comm: run_job(job_dir, comm))


if __name__ == "__main__":
    main()
