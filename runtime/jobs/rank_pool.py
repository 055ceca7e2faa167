"""Warm ranks: one job of N ranks kept up between `Program.run` calls, instead of a new job per call.

Starting a job costs each rank its interpreter, numpy, mpi4py and `MPI_Init` (a large
share of a small program's time) before any work; a notebook or a test suite that runs many small programs pays
that again and again.
With `SLICER_KEEP_RANKS=1` in the environment, `Program.run(..., ranks=N)` (one untimed run: no
`return_timings`, `repeat=1`) runs on a job of N ranks kept for the rest of the process (`RankJob` serving
`rank_server`, as a training session does): each call loads its program on the ranks (kernels from the
cache, as a launched job does), sends every rank its blocks of the arguments and assembles the results. A
session (`Program.session(ranks=N)`) borrows the kept job while it is open (`borrow`, `give_back`): its state stays
on those ranks, and a run or another session meanwhile gets a job of its own.

A job is kept per number of ranks and `mpiexec`, and only for the environment it was started in: a call
made under other `SLICER_*`/`MPIR_*` settings (which the ranks read when they start) replaces it. A job whose
rank failed is dropped (the call raises the rank's error, as a launched job's does). Every kept job ends with
the process (`atexit`; the ranks also die with it, `runtime.jobs.mpiexec`).
"""

from __future__ import annotations

import atexit
from collections.abc import Sequence

import numpy as np

from slicer.core import environment
from slicer.core.errors import RunError
from slicer.lowering import KernelGraph

from ..execution.executor import RunOptions
from .program_load import load_program
from .rank_job import RankJob
from .session import SessionPlan

KEEP_RANKS_ENV = environment.KEEP_RANKS.name
_JOBS: dict[tuple, RankJob] = {}
_LENT: set[int] = set()  # id() of the kept jobs a session holds (`borrow`): no other call may load a program there


def keeping_ranks() -> bool:
    """Whether `Program.run` should use warm ranks (`SLICER_KEEP_RANKS=1`)."""
    return environment.value(environment.KEEP_RANKS) == "1"


def _environment_key() -> tuple:
    """The settings a rank reads when it starts: a kept job serves only calls made under the same ones."""
    return environment.slicer_settings()


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


def _lent(ranks: int, mpiexec: str | None) -> bool:
    """Whether a session holds the kept job of `ranks` ranks; one whose ranks failed is taken back (its session
    can only fail now) and dropped."""
    job = _JOBS.get((ranks, mpiexec))
    if job is not None and id(job) in _LENT and not job.healthy:
        give_back(job)
        return False
    return job is not None and id(job) in _LENT


def borrow(ranks: int, mpiexec: str | None, timeout: float) -> RankJob | None:
    """The kept job of `ranks` ranks for a session to hold until it closes (`give_back`), when ranks are kept
    (`SLICER_KEEP_RANKS=1`) and no other session holds it; else None (the session starts a job of its own). A
    session step after step is what warm ranks are for: starting its ranks was most of a short session's CPU."""
    if not keeping_ranks() or _lent(ranks, mpiexec):
        return None
    job = warm_job(ranks, mpiexec, timeout)
    _LENT.add(id(job))
    return job


def give_back(job: RankJob) -> None:
    """A session is done with `job` (from `borrow`): kept for the next call, or dropped if a rank failed."""
    _LENT.discard(id(job))
    if not job.healthy:
        for key, kept in list(_JOBS.items()):
            if kept is job:
                del _JOBS[key]
        job.close(graceful=False)


def run_warm(graph: KernelGraph, arrays: Sequence[np.ndarray], ranks: int, *, mpiexec: str | None = None,
             timeout: float = 600, oversubscribe: bool = False, options: RunOptions | None = None):
    """Run `graph` once on the kept job of `ranks` ranks with the global `arrays`; the global results (one
    array, or a tuple), as a session's step returns them. While a session holds the kept job, on a job of
    its own. `options`: how its collectives run (None: the environment's defaults)."""
    plan = SessionPlan.stateless(graph)
    own = _lent(ranks, mpiexec)
    job = RankJob(ranks, mpiexec=mpiexec, timeout=timeout) if own else warm_job(ranks, mpiexec, timeout)
    try:
        load_program(job, plan, oversubscribe=oversubscribe, options=options or RunOptions.chosen())
        replies = job.request([("step", {i: plan.block(a, i, r) for i, a in enumerate(arrays)})
                               for r in range(ranks)])
    except RunError:
        if not own and not job.healthy:  # a step refused on its data (KernelAssertionError) leaves it serving
            _JOBS.pop((ranks, mpiexec), None)
        raise
    finally:
        if own:
            job.close()
    return plan.outputs(replies)


@atexit.register
def close_all() -> None:
    """End every kept job (at exit)."""
    while _JOBS:
        _, job = _JOBS.popitem()
        job.close()


__all__ = ["KEEP_RANKS_ENV", "borrow", "close_all", "give_back", "keeping_ranks", "run_warm"]
