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
    plan = SessionPlan.stateless(graph)

    def blocks(rank: int) -> list[np.ndarray] | None:
        if arrays is not None:
            return [plan.block(np.asarray(a), i, rank) for i, a in enumerate(arrays)]
        return rank_inputs(graph, rank, files=inputs) if inputs else None

    job = RankJob(ranks, mpiexec=mpiexec, timeout=timeout)
    try:
        load_program(job, plan, oversubscribe=oversubscribe, options=options or RunOptions.chosen())
        parts = job.request([("timed", blocks(rank), seed, repeat) for rank in range(ranks)])
    finally:
        job.close()
    return combine(graph, parts, repeat)


__all__ = ["launch"]
