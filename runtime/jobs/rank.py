"""What every rank runs around its work: one failing rank stops the whole job.

`run_rank(main)` calls `main(comm)`; if it raises, the rank prints
`slicer rank R failed:` and the error to stderr (a Slicer error's class and message, which say what
to change; the traceback of anything else, which is a bug to report), flushes, and calls
`MPI_Abort`, which makes `mpiexec` kill every rank and exit non-zero: the job
stops promptly with the failing rank's message instead of hanging in the next
collective.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
import traceback
from functools import lru_cache

from slicer.core import environment
from slicer.core.errors import LaunchError, SlicerError

ABORT_GRACE_SECONDS = 0.3
"""How long a failing rank waits between writing its message and `MPI_Abort`. The message is in the pipe to
Hydra's proxy by then, but the abort makes Hydra kill the job and it may exit before forwarding what the
proxy had not read yet: on a loaded machine the user then saw a failed job with an empty stderr. The wait
costs only failing jobs."""


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


def at_step(rank: int, step: str) -> None:
    """A rank's named points ("compiled", "run", "step0", ...): when `$SLICER_RANK_HOOK` names a Python file, its
    `at_step(rank, step)` runs here. The tests kill or stop a rank at a chosen point with it (test/rank_faults.py);
    the package itself has no such code path."""
    path = environment.value(environment.RANK_HOOK)
    if path:
        _hook(path)(rank, step)


@lru_cache(maxsize=4)
def _hook(path: str):
    """The `at_step` function of the file at `path`, loaded once."""
    spec = importlib.util.spec_from_file_location("slicer_rank_hook", path)
    if spec is None or spec.loader is None or not os.path.isfile(path):
        raise LaunchError(f"{environment.RANK_HOOK.name}={path!r} is not a Python file: name one that defines "
                          "at_step(rank, step), or unset it")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, "at_step", None)):
        raise LaunchError(f"{environment.RANK_HOOK.name}={path!r} defines no at_step(rank, step)")
    return module.at_step
