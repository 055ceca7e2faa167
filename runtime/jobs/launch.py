"""Starting a kernel graph on MPI ranks for a timed run and reading its results back (`slicer-run`, `Program.run`).

The run takes the one path every driver-started job takes (`runtime.jobs.rank_server`, the protocol a session uses
too): a job of `ranks` ranks (`RankJob`, on this host or on the hosts mpiexec places them on), the program
loaded on it (`program_load.load_program`: kernels compiled or found here once, found by cache key on every host),
then one "timed" request: each rank gets its blocks of the arguments over the link (the driver takes them
from the global arrays, or from `.npy` files through a memory map, a rank's block at a time), or makes random
blocks from a seed itself, runs them (`timed_run`) and replies with its result blocks and measurements, which
the driver assembles. Nothing goes through a directory the ranks would have to share with the driver.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from slicer.core.errors import RunError
from slicer.lowering import KernelGraph

from ..execution.executor import RunOptions
from ..execution.timings import Timings
from .program_load import load_program
from .rank_job import RankJob
from .session import SessionPlan
from .timed_run import combine, rank_inputs


def launch(graph: KernelGraph, ranks: int, *, arrays: Sequence[np.ndarray] | None = None,
           inputs: Sequence[str] | None = None, seed: int = 0, repeat: int = 1, timeout: float = 600,
           mpiexec: str | None = None, oversubscribe: bool = False,
           options: RunOptions | None = None) -> tuple[list[np.ndarray], Timings]:
    """Run `graph` on `ranks` MPI ranks with the global `arrays`, or inputs from `.npy` files, or random from
    `seed`, `repeat` timed runs; the global results and the run's timings. `options`: how its collectives run
    (None: the environment's defaults)."""
    if repeat < 1:
        raise RunError(f"repeat={repeat}: give the number of timed runs, at least 1")
    job = RankJob(ranks, mpiexec=mpiexec, timeout=timeout)
    try:
        return _timed(job, graph, arrays, inputs, seed, repeat, oversubscribe, options)
    finally:
        job.close()


def launch_each(runs: Sequence[tuple[KernelGraph, Sequence[np.ndarray], RunOptions | None]], ranks: int, *,
                repeat: int = 1, timeout: float = 600, mpiexec: str | None = None,
                oversubscribe: bool = False) -> list[tuple[list[np.ndarray], Timings]]:
    """`launch` of each (graph, global arrays, options) in `runs`, in order, on one job of `ranks` ranks: the ranks
    start once for a series of measurements (`slicer-plan --calibrate kernels`' probes) instead of once per run,
    which was most of a small program's cost. Each run loads its program with its options (None: the
    environment's defaults) and warms it up before timing it, as `launch` does; what a rank keeps from the runs
    before (warm caches, a grown heap) is what a session's steps keep."""
    if repeat < 1:
        raise RunError(f"repeat={repeat}: give the number of timed runs, at least 1")
    job = RankJob(ranks, mpiexec=mpiexec, timeout=timeout)
    try:
        return [_timed(job, graph, arrays, None, 0, repeat, oversubscribe, options)
                for graph, arrays, options in runs]
    finally:
        job.close()


def _timed(job: RankJob, graph: KernelGraph, arrays, inputs, seed: int, repeat: int, oversubscribe: bool,
           options: RunOptions | None) -> tuple[list[np.ndarray], Timings]:
    """`graph` loaded on `job` and its timed run (`launch`'s arguments); the global results and timings."""
    plan = SessionPlan.stateless(graph)

    def blocks(rank: int) -> list[np.ndarray] | None:
        if arrays is not None:
            return [plan.block(np.asarray(a), i, rank) for i, a in enumerate(arrays)]
        return rank_inputs(graph, rank, files=inputs) if inputs else None

    load_program(job, plan, oversubscribe=oversubscribe, options=options or RunOptions.chosen())
    parts = job.request([("timed", blocks(rank), seed, repeat) for rank in range(job.ranks)])
    return combine(graph, parts, repeat)


__all__ = ["launch", "launch_each"]
