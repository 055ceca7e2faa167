"""Independent descents of the search run side by side, one forked process per core.

The descents of `descent.TacticSearch.run` from different starting points share nothing but the cache of priced
tilings, which only saves work: a descent's end point depends on its start alone (the model is a pure function
of the tiling). So on a machine with more than one core the search forks one process per further core (up to
the number of tasks); every process, this one included, takes the next task not taken yet until none is left,
and each child sends back its tasks' results and the tilings it priced, which join this process's cache. The
answers are the ones the tasks give run one after another, in the same order (the time it saves:
benchmarks/README.md, `auto.py`).

Forked rather than spawned: a child starts with the sketch, the evaluator and its memos, and the cache in place,
so nothing is pickled on the way in. `multiprocessing`'s pools pickle each work item, here a bound method of a
search holding the whole program, hence `os.fork` with one pipe per child (and a task counter in shared memory
from `multiprocessing`). A child that fails (or is killed) has its tasks run by the parent: a fork is an
optimisation, never a way to lose an answer.

Not forked (the tasks run here, in order): one core, `$SLICER_AUTO_PROCESSES=1` (or the number of processes to
use at most), tasks too small to pay for a fork (`MIN_SECONDS` expected per task), no `os.fork` (Windows), or MPI
initialised in this process (an MPI library does not support a forked child of a rank)."""

from __future__ import annotations

import gc
import multiprocessing
import os
import pickle
import select
import signal
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from slicer.core import environment
from slicer.core.errors import AutoError
from slicer.core.host import host_cores

PROCESSES_ENV = environment.AUTO_PROCESSES.name
#: The work a task must be expected to take for forking to pay: a fork of a process holding torch and the
#: search's memos, and the copies its child makes of the pages it touches, cost tens of milliseconds.
MIN_SECONDS = 0.2
#: The least time a child is given to finish once this process has run out of tasks (see `run_tasks`).
WAIT_SECONDS = 10.0


def processes(task_count: int, seconds_per_task: float) -> int:
    """How many processes (this one included) run `task_count` tasks expected to take `seconds_per_task` each.
    A bad `$SLICER_AUTO_PROCESSES` is refused whether or not this search would fork."""
    text = environment.value(environment.AUTO_PROCESSES) or ""
    try:
        limit = int(text) if text else None
    except ValueError:
        raise AutoError(f"${PROCESSES_ENV}={text!r} is not a whole number of processes: give e.g. 1 (no forked "
                        "processes) or 2") from None
    if limit is not None and limit < 1:
        raise AutoError(f"${PROCESSES_ENV}={text!r}: give at least 1 process")
    if task_count < 2 or seconds_per_task < MIN_SECONDS or not hasattr(os, "fork") or _mpi_initialised():
        return 1
    cores = host_cores()
    return max(1, min(task_count, cores, limit or cores))


def run_tasks(tasks: Sequence[Callable[[], object]], cache: dict, seconds_per_task: float,
              compact: Callable[[Any], object] = lambda value: value) -> list:
    """The results of `tasks`, in order, each run in this process or in a forked child (see the module
    docstring); the entries the children add to `cache` join it, as `compact` makes them (what is worth
    sending back: the search's estimates without their list of collectives, re-priced here if needed).

    Tasks are handed out one at a time from a counter in shared memory, in order, to whichever process is
    free (descents differ widely in length: a fixed split left one process waiting for the other)."""
    count = processes(len(tasks), seconds_per_task)
    if count == 1:
        return [task() for task in tasks]
    counter = multiprocessing.get_context("fork").Value("i", 0)
    started = time.perf_counter()
    children = [_fork(tasks, counter, cache, compact) for _ in range(count - 1)]
    results: dict[int, object] = {}
    try:
        results.update(_take(tasks, counter))
    except BaseException:  # (an interrupt): the children's work is not wanted
        for child in children:
            _receive(child, deadline=0.0)
        raise
    # Once this process found no task left, each child has at most one to finish: one that takes far longer
    # than this process took for all of its own is stuck, and is killed (its tasks run here), never waited for.
    deadline = time.perf_counter() + max(WAIT_SECONDS, 2 * (time.perf_counter() - started))
    for found in (_receive(child, deadline) for child in children):
        if found is None:
            continue  # a child that failed: its tasks are run below
        child_results, priced = found
        results.update(child_results)
        for key, value in priced.items():
            cache.setdefault(key, value)
    for index in range(len(tasks)):
        if index not in results:
            results[index] = tasks[index]()
    return [results[index] for index in range(len(tasks))]


def _take(tasks, counter) -> dict[int, object]:
    """Run the next task not taken yet until none is left; {index: result} of those run here."""
    done: dict = {}
    while True:
        with counter.get_lock():
            index = counter.value
            counter.value += 1
        if index >= len(tasks):
            return done
        done[index] = tasks[index]()


def _fork(tasks, counter, cache: dict, compact) -> tuple[int, int]:
    """Start a child taking tasks from `counter`; (its pid, the read end of the pipe it answers on)."""
    read, write = os.pipe()
    with warnings.catch_warnings():  # Python 3.12 warns of forking with threads alive: the child runs no thread
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid:
        os.close(write)
        return pid, read
    os.close(read)
    # No collection of cyclic garbage here: garbage the parent left (an MLIR context from a compile) would be
    # destroyed in this child, whose destructor joins LLVM threads that a forked process does not have (a
    # hang seen on the GPT step's benchmark). The search makes little cyclic garbage in its seconds here.
    gc.disable()
    status = 1
    try:
        known = set(cache)
        done = _take(tasks, counter)
        priced = {key: compact(value) for key, value in cache.items() if key not in known}
        payload = pickle.dumps((done, priced), protocol=pickle.HIGHEST_PROTOCOL)
        with os.fdopen(write, "wb") as pipe:
            pipe.write(payload)
        status = 0
    except BaseException:  # noqa: BLE001 - the parent runs the child's tasks again, and reports any error itself
        pass
    finally:
        os._exit(status)  # no atexit handlers, no buffers flushed twice: the parent owns them


def _receive(child: tuple[int, int], deadline: float):
    """A child's ({index: result}, priced entries), or None if it failed or did not answer by `deadline` (a
    `time.perf_counter()`; then it is killed)."""
    pid, read = child
    chunks = []
    with os.fdopen(read, "rb") as pipe:
        while True:
            ready, _, _ = select.select([pipe], [], [], max(0.0, deadline - time.perf_counter()))
            chunk = pipe.read1(1 << 20) if ready else None
            if not chunk:
                break
            chunks.append(chunk)
    if chunk is None:  # out of time
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    payload = b"".join(chunks)
    if chunk is None or status != 0 or not payload:
        return None
    try:
        return pickle.loads(payload)
    except Exception:  # noqa: BLE001 - a truncated payload: the child died while writing
        return None


def _mpi_initialised() -> bool:
    mpi = sys.modules.get("mpi4py.MPI")
    try:
        return bool(mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized())
    except Exception:  # noqa: BLE001 - an MPI state that cannot be asked: do not fork
        return True
