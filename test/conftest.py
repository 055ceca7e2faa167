"""Settings shared by every pytest test.

The MPI tests run 4- and 8-rank jobs on small CI machines (2 cores): they oversubscribe on purpose, so the
launcher's refusal of more ranks than cores (`slicer.runtime.jobs.resources.check_ranks`) is lifted here. The
refusal itself is tested with the variable removed. Plans use the built-in cost figures, not the ones a
`slicer-plan --calibrate` run may have stored on this machine.

`make test` runs pytest with two workers (pytest-xdist), so an MPI job shares the cores with the other
worker's tests: waiting ranks sleep between polls (`SLICER_MPI_YIELD=1`, see `slicer.runtime.jobs.mpiexec`)
instead of spinning on a core another process needs. Untimed `Program.run` calls reuse warm ranks
(`SLICER_KEEP_RANKS=1`, see `slicer.runtime.jobs.rank_pool`).

Kernels are compiled once per run: every test, worker process and MPI rank shares one kernel cache,
`build/test-kernel-cache/run-*` (`SLICER_CACHE_DIR`), made empty when the run starts and removed when it
ends. Empty at the start, so a run is hermetic: what it measures and checks does not depend on kernels left by
an earlier run or another checkout (the cache key does cover the code generators' Python, see
`slicer.lowering.aot`, but a test must not rely on a user's cache); shared,
because the cache serialises builders of one key with a lock and publishes entries by rename (safe for
concurrent processes). The tests of the cache itself use directories of their own. A `SLICER_CACHE_DIR`
already set by the caller is used as it is.
"""

import os
import shutil
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("SLICER_OVERSUBSCRIBE", "1")
# Plans must not depend on this machine's `slicer-plan --calibrate` figures (redistribution.costs).
os.environ.setdefault("SLICER_COST_MODEL", "builtin")
# Nor the search's choices on its kernel figures (slicer.automatic.machine, `slicer-plan --calibrate kernels`).
os.environ.setdefault("SLICER_MACHINE", "builtin")
# MPI ranks share the cores with the other test worker: a waiting rank sleeps instead of spinning.
os.environ.setdefault("SLICER_MPI_YIELD", "1")
# Program.run reuses a job per rank count (slicer.runtime.jobs.rank_pool) instead of starting ranks for every call:
# starting them is most of an MPI test's CPU. The launched path stays covered: timed runs, slicer-run and the
# tests of test/mpi/test_rank_pool.py that turn it off.
os.environ.setdefault("SLICER_KEEP_RANKS", "1")

REPO = Path(__file__).resolve().parents[1]
RUN_CACHES = REPO / "build" / "test-kernel-cache"
_OWN_CACHE: list[str] = []  # the run cache this process made (the xdist controller, or a run without workers)


def pytest_configure(config):
    # xdist workers inherit the controller's environment: the controller alone makes the run's cache.
    if hasattr(config, "workerinput") or os.environ.get("SLICER_CACHE_DIR"):
        return
    RUN_CACHES.mkdir(parents=True, exist_ok=True)
    path = tempfile.mkdtemp(prefix="run-", dir=RUN_CACHES)
    _OWN_CACHE.append(path)
    os.environ["SLICER_CACHE_DIR"] = path


def pytest_unconfigure(config):
    while _OWN_CACHE:
        path = _OWN_CACHE.pop()
        shutil.rmtree(path, ignore_errors=True)
        if os.environ.get("SLICER_CACHE_DIR") == path:
            del os.environ["SLICER_CACHE_DIR"]


# The tiers (markers registered in pyproject.toml; `make check` runs `-m "not mpi and not benchmark and not slow"`,
# `make test` everything). Two are set here from where a test lives, so a new file is in its tier without a
# decorator: every test of test/mpi/ starts MPI ranks, every `*_benchmark.py` runs a benchmark script. `slow`
# is written on the test: more than about half a second of CPU on its own (a torch import and training,
# subprocesses, hundreds of cases), measured, not guessed; the unit tests that start MPI ranks carry `mpi`.
TIER_BY_PATH = (
    ("test/mpi/", "mpi"),
    ("_benchmark.py", "benchmark"),
)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by these markers
def pytest_collection_modifyitems(config, items):
    for item in items:
        path = Path(item.path).resolve().relative_to(REPO).as_posix()
        for where, marker in TIER_BY_PATH:
            if where in path:
                item.add_marker(marker)
    # The long tests first (`slow`, then the benchmarks; this replaces a hand list of them): xdist hands out tests
    # in collection order and a worker that runs out steals from another's end, so the tests left for last are
    # short ones and the workers finish together instead of one running a long test while the other is idle.
    def weight(item):
        return 0 if item.get_closest_marker("slow") else 1 if item.get_closest_marker("benchmark") else 2

    items.sort(key=weight)  # stable: every other test keeps its place


@pytest.fixture(scope="session")
def cache_dir() -> Path:
    """The run's kernel cache, shared by every test and worker (kernels compiled once per run)."""
    return Path(os.environ["SLICER_CACHE_DIR"])
