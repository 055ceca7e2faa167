"""Sessions on MPI ranks: the state stays on the ranks, a step sends the batch only, failures end the session
with the rank's message, and the same API inside the user's own mpiexec job."""

import sys
from pathlib import Path

import numpy as np
import pytest

from rank_faults import kill_env
from slicer.core.errors import RunError
from slicer.runtime.jobs.mpiexec import run_spmd

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "unit" / "runtime"))
from session_programs import compiled, data, expected  # noqa: E402


@pytest.fixture(scope="module")
def prog():
    return compiled()


def test_a_session_on_two_ranks_keeps_the_state_and_sends_only_the_batch(prog):
    x, w0 = data()
    outs, w_final = expected(x, w0, 3)
    with prog.session(ranks=2, state={"w": w0}) as s:
        at_start = s.sent.payload
        assert at_start == 2 * w0.nbytes  # the replicated w, once per rank
        for want in outs:
            before = (s.sent.payload, s.sent.message)
            np.testing.assert_allclose(s.step(x), want, rtol=1e-5)
            assert s.sent.payload - before[0] == x.nbytes  # each rank its half of the batch, nothing else
            assert s.sent.message - before[1] < x.nbytes + 1024  # the framing of two small messages
        np.testing.assert_array_equal(s.state_dict()["w"], w_final)


def test_a_rank_dying_mid_step_ends_the_session_with_its_message(prog, monkeypatch):
    for name, text in kill_env("1:step1").items():
        monkeypatch.setenv(name, text)
    x, w0 = data()
    s = prog.session(ranks=2, state={"w": w0})
    address = s.job.process.args[-1]  # the job's own socket: in the command line of mpiexec and of every rank
    assert len(_processes_with(address)) >= 3
    s.step(x)
    # rank 1 is named; on a loaded machine mpiexec may have ended rank 0 before the driver looks, and then both
    # are (`RankJob._lost`: which died first cannot be told from outside)
    with pytest.raises(RunError, match=r"(rank 1|ranks 0, 1) of the job of 2 ranks went away"):
        s.step(x)
    with pytest.raises(RunError, match="has ended"):
        s.step(x)
    s.close()
    assert _processes_with(address) == []


def _processes_with(text: str) -> list[int]:
    """The live processes whose command line contains `text`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and text.encode() in (entry / "cmdline").read_bytes() \
                    and "Z" not in (entry / "stat").read_text().split(")")[-1].split()[0]:
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_the_session_api_inside_an_mpiexec_job():
    done = run_spmd(2, [sys.executable, str(HERE / "session_worker.py"), str(HERE.parent / "unit" / "runtime")],
                    timeout=240)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("session ok") == 2
