"""A failing or killed rank stops the whole job promptly with that rank's message (no hang)."""

import sys
import time
from pathlib import Path

import pytest

from rank_faults import kill_env
from slicer.core.errors import LaunchError
from slicer.runtime.jobs.mpiexec import find_mpiexec, run_spmd

WORKER = str(Path(__file__).with_name("fault_worker.py"))


def test_a_raising_rank_aborts_the_job_with_its_traceback():
    start = time.monotonic()
    result = run_spmd(4, [sys.executable, WORKER, "raise"], timeout=60)
    assert result.returncode != 0
    assert "slicer rank 1 failed:" in result.stderr
    assert "ValueError: input block of rank 1 is wrong" in result.stderr
    assert time.monotonic() - start < 30


def test_a_rank_with_a_slicer_error_prints_the_message_not_a_traceback():
    """A Slicer error says what to change; its traceback (Slicer's own frames) would only hide that."""
    result = run_spmd(2, [sys.executable, WORKER, "slicer-error"], timeout=60)
    assert result.returncode != 0
    assert "slicer rank 1 failed: InputError: input block of rank 1 is wrong" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_killed_rank_stops_the_job():
    result = run_spmd(4, [sys.executable, WORKER, "ok"], timeout=60, env=kill_env("2:start"))
    assert result.returncode != 0
    assert "slicer rank 2: killed by" in result.stderr


def test_a_healthy_job_finishes():
    result = run_spmd(2, [sys.executable, WORKER, "ok"], timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("done 2.0") == 2


def test_missing_mpiexec_is_a_clear_error():
    with pytest.raises(LaunchError, match="mpiexec '/nonexistent/mpiexec' not found"):
        find_mpiexec("/nonexistent/mpiexec")
