"""When local ranks outnumber the cores, MPICH is told to sleep while waiting; each rank gets one BLAS/OpenMP
thread; settings in the environment win."""

from slicer.runtime.jobs import mpiexec
from slicer.runtime.jobs.mpiexec import THREAD_VARIABLES, YIELD_CVAR, spmd_command, thread_environment, wait_environment


def test_oversubscribed_ranks_sleep_while_waiting(monkeypatch):
    monkeypatch.setattr(mpiexec, "host_cores", lambda: 2)
    assert wait_environment(3, {}) == {YIELD_CVAR: "1"}
    assert wait_environment(8, {}) == {YIELD_CVAR: "1"}
    assert wait_environment(2, {}) == {}  # one core each: polling is fastest


def test_the_environment_wins(monkeypatch):
    monkeypatch.setattr(mpiexec, "host_cores", lambda: 2)
    assert wait_environment(8, {YIELD_CVAR: "0"}) == {}
    assert wait_environment(8, {"SLICER_MPI_YIELD": "0"}) == {}
    assert wait_environment(2, {"SLICER_MPI_YIELD": "1"}) == {YIELD_CVAR: "1"}
    assert wait_environment(8, {"SLICER_MPI_YIELD": "maybe"}) == {YIELD_CVAR: "1"}


def test_ranks_get_one_library_thread_unless_the_environment_says(monkeypatch):
    assert thread_environment({}) == {name: "1" for name in THREAD_VARIABLES}
    assert thread_environment({"OMP_NUM_THREADS": "4"}) == {name: "1" for name in THREAD_VARIABLES
                                                             if name != "OMP_NUM_THREADS"}
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    _, environment = spmd_command(2, ["true"])
    assert environment["OPENBLAS_NUM_THREADS"] == "2" and environment["OMP_NUM_THREADS"] == "1"
