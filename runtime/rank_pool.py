"""Warm ranks: one job of N ranks kept up between `Program.run` calls, instead of a new job per call.

Starting a job costs each rank its interpreter, numpy, mpi4py and `MPI_Init` (about 0.25 s of CPU per rank
here) before any work; a notebook or a test suite that runs many small programs pays that again and again.
With `SLICER_KEEP_RANKS=1` in the environment, `Program.run(..., ranks=N)` (one untimed run: no
`return_timings`, `repeat=1`) runs on a job of N ranks kept for the rest of the process (`RankJob` serving
`rank_server`, as a training session does): each call loads its program on the ranks (kernels from the
cache, as a launched job does), sends every rank its blocks of the arguments and assembles the results.

A job is kept per number of ranks and `mpiexec`, and only for the environment it was started in: a call
made under other `SLICER_*`/`MPIR_*` settings (which the ranks read when they start) replaces it. A job whose
rank failed is dropped (the call raises the rank's error, as a launched job's does). Every kept job ends with
the process (`atexit`; the ranks also die with it, `runtime.mpiexec`).
"""

from __future__ import annotations

import atexit
import os
from typing import Sequence

import numpy as np

from slicer.core.errors import RunError
from slicer.lowering import KernelGraph

from .rank_job import RankJob
from .session import SessionPlan, load_program

KEEP_RANKS_ENV = "SLICER_KEEP_RANKS"
_JOBS: dict[tuple, RankJob] = {}


def keeping_ranks() -> bool:
    """Whether `Program.run` should use warm ranks (`SLICER_KEEP_RANKS=1`)."""
    return os.environ.get(KEEP_RANKS_ENV, "0") == "1"


def _environment_key() -> tuple:
    """The settings a rank reads when it starts: a kept job serves only calls made under the same ones."""
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(("SLICER_", "MPIR_"))))


def warm_job(ranks: int, mpiexec: str | None, timeout: float) -> RankJob:
    """The kept job of `ranks` ranks for this environment, started if there is none."""
    key = (ranks, mpiexec)
    job = _JOBS.get(key)
    if job is not None and (job.environment != _environment_key() or not job.healthy):
        job.close(graceful=job.healthy)
        del _JOBS[key]
        job = None
    if job is None:
        job = RankJob(ranks, mpiexec=mpiexec, timeout=timeout)
        job.environment = _environment_key()
        _JOBS[key] = job
    job.timeout = timeout
    return job


def run_warm(graph: KernelGraph, arrays: Sequence[np.ndarray], ranks: int, *, mpiexec: str | None = None,
             timeout: float = 600):
    """Run `graph` once on the kept job of `ranks` ranks with the global `arrays`; the global results (one
    array, or a tuple), as a session's step returns them."""
    plan = SessionPlan.stateless(graph)
    job = warm_job(ranks, mpiexec, timeout)
    try:
        load_program(job, plan)
        replies = job.request([("step", {i: plan.block(a, i, r) for i, a in enumerate(arrays)})
                               for r in range(ranks)])
    except RunError:
        _JOBS.pop((ranks, mpiexec), None)
        raise
    return plan.outputs(replies)


@atexit.register
def close_all() -> None:
    """End every kept job (at exit)."""
    while _JOBS:
        _, job = _JOBS.popitem()
        job.close()


__all__ = ["KEEP_RANKS_ENV", "close_all", "keeping_ranks", "run_warm"]
