"""Finding and starting `mpiexec`.

Order: an explicit path, the `mpiexec` installed beside this interpreter (the
`mpich` wheel puts it in the venv's bin/), then PATH. Hydra (MPICH) runs as root
and oversubscribes cores without extra flags, so `slicer.runtime.jobs.resources`
decides beforehand whether a job fits the host; when the ranks outnumber the cores,
MPICH is told to sleep instead of spinning while a rank waits (`wait_environment`).

The job runs in its own process group (session), which is ended whenever the
launcher stops waiting for it: on a timeout, an exception (Ctrl-C) or a
terminating signal; on Linux `mpiexec` also gets SIGTERM when the launching
process dies, even by SIGKILL. No rank outlives the command that started it.
"""

from __future__ import annotations

import ctypes
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

from slicer.core import environment
from slicer.core.errors import LaunchError
from slicer.core.host import host_cores

YIELD_CVAR = environment.MPICH_YIELD.name
YIELD_ENV = environment.MPI_YIELD.name


def wait_environment(ranks: int, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The MPICH settings for `ranks` local ranks: when they outnumber the cores, a rank waiting for a message
    sleeps (`nanosleep`, with Linux's default timer slack) between polls instead of spinning, so
    the ranks with work get the cores. MPICH's ch4 device calls this yield in every blocking wait of a
    threaded MPI (mpi4py initialises MPI_THREAD_MULTIPLE); the default, `sched_yield`, does not give the core
    away under Linux's CFS scheduler (measured in benchmarks/README.md, "Waiting"). A setting already in the
    environment wins; `SLICER_MPI_YIELD=0/1` forces
    it off / on."""
    environ = environment.for_child() if environ is None else environ
    if YIELD_CVAR in environ:
        return {}
    wanted = environ.get(YIELD_ENV)
    sleep = wanted == "1" if wanted in ("0", "1") else ranks > host_cores()
    return {YIELD_CVAR: "1"} if sleep else {}


THREAD_VARIABLES = tuple(variable.name for variable in environment.THREADS)


def thread_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """One BLAS/OpenMP thread per rank, for each of those settings the environment does not already give (as
    `torchrun` does for OMP_NUM_THREADS): a rank is one of several processes sharing the host's cores, and its
    kernels are Slicer's own, so a library's thread pool only oversubscribes the cores. numpy's OpenBLAS also
    starts its pool at import: CPU time per rank, for threads a rank never uses."""
    environ = environment.for_child() if environ is None else environ
    return {name: "1" for name in THREAD_VARIABLES if name not in environ}


def mpiexec_command(explicit: str | None = None) -> list[str]:
    """The launcher's command: `explicit` may be a path or a command line with options ("mpiexec -f hosts",
    "mpiexec -hosts a:4,b:4": ranks on several hosts), else `find_mpiexec`'s."""
    if explicit and not Path(explicit).is_file() and len(shlex.split(explicit)) > 1:
        first, *options = shlex.split(explicit)
        return [find_mpiexec(first), *options]
    return [find_mpiexec(explicit)]


def find_mpiexec(explicit: str | None = None) -> str:
    if explicit:
        path = shutil.which(explicit) or (explicit if Path(explicit).is_file() else None)
        if path is None:
            raise LaunchError(f"mpiexec '{explicit}' not found (given with --mpiexec)")
        return path
    beside = Path(sys.executable).with_name("mpiexec")
    if beside.is_file():
        return str(beside)
    found = shutil.which("mpiexec")
    if found is None:
        raise LaunchError("mpiexec not found next to the Python interpreter nor on PATH: `pip install mpich`, "
                          "or give its path with --mpiexec")
    return found


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass  # not Linux: the signal handlers and the finally clause still end the group


def _end_group(process: subprocess.Popen) -> None:
    """Terminate the job's whole process group (mpiexec and every rank), then reap mpiexec."""
    if process.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def spmd_command(ranks: int, argv: list[str], *, mpiexec: str | None = None,
                 env: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that start `argv` on `ranks` local MPI ranks."""
    command = [*mpiexec_command(mpiexec), "-n", str(ranks), *argv]
    child = environment.for_child({**(env or {}), "PYTHONUNBUFFERED": "1"})
    child.update(wait_environment(ranks, child))
    child.update(thread_environment(child))
    return command, child


def start_spmd(ranks: int, argv: list[str], *, mpiexec: str | None = None, env: dict[str, str] | None = None,
               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) -> subprocess.Popen:
    """Start `argv` on `ranks` MPI ranks in a process group of its own, without waiting; `end_job` ends it.
    The job also ends when this process dies (Linux)."""
    command, environment = spmd_command(ranks, argv, mpiexec=mpiexec, env=env)
    # stdin from /dev/null: Hydra forwards its stdin to rank 0, so a job that outlives a call (warm ranks, a
    # session) would otherwise read what the launching process's own stdin receives afterwards.
    return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, text=True,
                            env=environment, start_new_session=True, preexec_fn=_die_with_parent)


def end_job(process: subprocess.Popen) -> None:
    """Terminate a job `start_spmd` started (mpiexec and every rank), then reap mpiexec."""
    _end_group(process)


def run_spmd(ranks: int, argv: list[str], *, mpiexec: str | None = None, timeout: float | None = None,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run `argv` (a command) on `ranks` MPI ranks; output is captured. Raises LaunchError on a timeout."""
    process = start_spmd(ranks, argv, mpiexec=mpiexec, env=env, stdout=subprocess.PIPE)
    command: list[str] = process.args  # type: ignore[assignment]  # start_job passes a list of str
    previous: dict = {}

    def stop(signum, frame):  # a terminating signal ends the job, then the launcher as it would have
        _end_group(process)
        signal.signal(signum, previous.get(signum, signal.SIG_DFL))
        os.kill(os.getpid(), signum)

    if threading.current_thread() is threading.main_thread():  # signal handlers can only be set there
        for signum in (signal.SIGTERM, signal.SIGHUP):
            previous[signum] = signal.signal(signum, stop)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _end_group(process)
        raise LaunchError(
            f"the SPMD job on {ranks} ranks did not finish within {timeout} s: {' '.join(command)}"
        ) from None
    finally:
        _end_group(process)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
