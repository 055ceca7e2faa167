"""When local ranks outnumber the cores, MPICH is told to sleep while waiting; settings in the environment win."""

from slicer.runtime import mpiexec
from slicer.runtime.mpiexec import YIELD_CVAR, wait_environment


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
