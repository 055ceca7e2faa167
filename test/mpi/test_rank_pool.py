"""Warm ranks (`SLICER_KEEP_RANKS=1`): Program.run reuses one job per rank count and environment, a failed job
is dropped, a session borrows the kept job (one session at a time; runs meanwhile get a job of their own), and
without the setting every run launches its own job."""

import sys
from pathlib import Path

import numpy as np
import pytest

import slicer
from rank_faults import kill_env
from slicer.core.errors import RunError
from slicer.runtime.jobs import rank_pool

sys.path.insert(0, str(Path(__file__).parent.parent / "unit" / "runtime"))
from session_programs import STEP, compiled, data, expected


@pytest.fixture(scope="module")
def prog():
    return compiled()


def kept_job():
    return rank_pool._JOBS.get((2, None))


def test_runs_reuse_the_kept_job_and_match_numpy(prog, monkeypatch):
    monkeypatch.setenv(rank_pool.KEEP_RANKS_ENV, "1")
    x, w = data()
    y, w2 = prog.run(x, w, ranks=2)
    job = kept_job()
    assert job is not None and job.healthy
    y_again, _ = prog.run(2 * x, w, ranks=2)
    assert kept_job() is job  # the same ranks served the second run
    np.testing.assert_allclose(y, x @ w, rtol=1e-5)
    np.testing.assert_allclose(y_again, 2 * x @ w, rtol=1e-5)
    np.testing.assert_array_equal(w2, 2 * w)


def test_another_environment_gets_another_job_and_a_failed_job_is_dropped(prog, monkeypatch):
    monkeypatch.setenv(rank_pool.KEEP_RANKS_ENV, "1")
    x, w = data()
    prog.run(x, w, ranks=2)
    first = kept_job()
    for name, text in kill_env("1:step0").items():  # ranks read it when they start: a new job must serve
        monkeypatch.setenv(name, text)
    with pytest.raises(RunError, match=r"rank 1|ranks 0, 1"):  # both when mpiexec ended rank 0 first (RankJob._lost)
        prog.run(x, w, ranks=2)
    assert not first.healthy and kept_job() is None  # replaced, and the failed one dropped
    for name in kill_env(""):
        monkeypatch.delenv(name)
    y, _ = prog.run(x, w, ranks=2)
    np.testing.assert_allclose(y, x @ w, rtol=1e-5)


def test_a_session_borrows_the_kept_job_and_others_meanwhile_get_their_own(prog, monkeypatch):
    monkeypatch.setenv(rank_pool.KEEP_RANKS_ENV, "1")
    x, w0 = data()
    prog.run(x, w0, ranks=2)
    kept = kept_job()
    outs, w_final = expected(x, w0, 2)
    with prog.session(ranks=2, state={"w": w0}) as first:
        assert first.job is kept and first.sent.payload == 2 * w0.nbytes  # counted from the borrowing
        with prog.session(ranks=2, state={"w": 3 * w0}) as second:  # the kept job is held: a job of its own
            assert second.job is not kept
            np.testing.assert_allclose(second.step(x), x @ (3 * w0), rtol=1e-5)
        y, w2 = prog.run(x, w0, ranks=2)  # on a job of its own too: the session's program stays loaded
        np.testing.assert_allclose(y, x @ w0, rtol=1e-5)
        for want in outs:
            np.testing.assert_allclose(first.step(x), want, rtol=1e-5)
        np.testing.assert_array_equal(first.state_dict()["w"], w_final)
    assert not second.job.healthy and kept.healthy and kept_job() is kept  # given back, up for the next call
    y, _ = prog.run(2 * x, w0, ranks=2)
    np.testing.assert_allclose(y, 2 * x @ w0, rtol=1e-5)
    with prog.session(ranks=2, state={"w": w0}) as again:
        assert again.job is kept


def test_a_refused_session_leaves_the_kept_job_to_the_next(prog, monkeypatch):
    monkeypatch.setenv(rank_pool.KEEP_RANKS_ENV, "1")
    x, w0 = data()
    prog.run(x, w0, ranks=2)
    kept = kept_job()
    bad = slicer.compile(STEP, mesh=slicer.Mesh(x=2), tactics=[slicer.Tile(arg="w", dim=0, axes="x"),
                                                               slicer.Replicate(result="w")])
    with pytest.raises(RunError, match="laid out as"):
        bad.session(ranks=2, state={"w": w0})
    with prog.session(ranks=2, state={"w": w0}) as s:
        assert s.job is kept


def test_without_the_setting_a_run_launches_its_own_job(prog, monkeypatch):
    monkeypatch.setenv(rank_pool.KEEP_RANKS_ENV, "0")
    rank_pool.close_all()
    x, w = data()
    (y, _), timings = prog.run(x, w, ranks=2, return_timings=True)
    assert kept_job() is None and timings.ranks == 2
    np.testing.assert_allclose(y, x @ w, rtol=1e-5)


def test_a_kept_job_leaves_the_launching_process_stdin_alone(tmp_path):
    """Hydra forwards its stdin to rank 0: a job kept up must not take what the launcher's stdin receives
    (the fuzzer's workers read their requests there)."""
    import os
    import subprocess

    script = tmp_path / "reads_stdin.py"
    script.write_text(f"""
import sys
sys.path.insert(0, {str(Path(__file__).parent.parent / 'unit' / 'runtime')!r})
from session_programs import compiled, data
compiled().run(*data(), ranks=2)
import time; time.sleep(1.0)  # the kept job is up while the line waits in the pipe
print("read:", sys.stdin.readline().strip())
""")
    done = subprocess.run([sys.executable, str(script)], input="a request\n", capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, SLICER_KEEP_RANKS="1"))
    assert done.returncode == 0, done.stderr
    assert "read: a request" in done.stdout
