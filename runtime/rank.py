"""What every rank runs around its work: one failing rank stops the whole job.

`run_rank(main)` calls `main(comm)`; if it raises, the rank prints
`slicer rank R failed:` and the error to stderr (a Slicer error's class and message, which say what
to change; the traceback of anything else, which is a bug to report), flushes, and calls
`MPI_Abort`, which makes `mpiexec` kill every rank and exit non-zero: the job
stops promptly with the failing rank's message instead of hanging in the next
collective.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback

from slicer.core.errors import SlicerError

ABORT_GRACE_SECONDS = 0.3
"""How long a failing rank waits between writing its message and `MPI_Abort`. The message is in the pipe to
Hydra's proxy by then, but the abort makes Hydra kill the job and it may exit before forwarding what the
proxy had not read yet: on a loaded machine the user then saw a failed job with an empty stderr. The wait
costs only failing jobs."""

FAIL_RANK_ENV = "SLICER_TEST_KILL_RANK"  # test hook: "R" or "R:step" kills rank R (at that step)
HANG_RANK_ENV = "SLICER_TEST_HANG_RANK"  # test hook: "R:step" stops rank R there (SIGSTOP), as a hung process


def run_rank(main, comm=None) -> None:
    from mpi4py import MPI

    comm = comm or MPI.COMM_WORLD
    try:
        main(comm)
    except BaseException as exc:  # noqa: BLE001 - any failure must stop the whole job
        if isinstance(exc, SystemExit) and not exc.code:
            return
        if isinstance(exc, SlicerError):
            sys.stderr.write(f"slicer rank {comm.Get_rank()} failed: {type(exc).__name__}: {exc}\n")
        else:
            sys.stderr.write(f"slicer rank {comm.Get_rank()} failed:\n{traceback.format_exc()}")
        sys.stderr.flush()
        time.sleep(ABORT_GRACE_SECONDS)
        comm.Abort(1)


def maybe_kill(rank: int, step: str) -> None:
    """Test hooks: die abruptly (no cleanup, like a crashed process), or stop (like a hung one), when asked to."""
    hang = os.environ.get(HANG_RANK_ENV, "").partition(":")
    if hang[0] and int(hang[0]) == rank and hang[2] == step:
        sys.stderr.write(f"slicer rank {rank}: stopped by {HANG_RANK_ENV} at {step}\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGSTOP)
    wanted = os.environ.get(FAIL_RANK_ENV)
    if not wanted:
        return
    target, _, at = wanted.partition(":")
    if int(target) == rank and (not at or at == step):
        sys.stderr.write(f"slicer rank {rank}: killed by {FAIL_RANK_ENV} at {step}\n")
        sys.stderr.flush()
        os._exit(17)
