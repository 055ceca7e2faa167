"""A failing or killed rank stops the whole job promptly with that rank's message (no hang)."""

import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import slicer
from rank_faults import kill_env
from slicer.core.errors import LaunchError
from slicer.runtime import launch
from slicer.runtime.job import KERNELS_FILE
from slicer.runtime.mpiexec import find_mpiexec, run_spmd

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


def test_a_rank_whose_kernel_cache_entry_is_gone_says_so(tmp_path):
    """The ranks load the cache entries the launcher named in `kernels.json`: one that is missing when a rank
    loads it (deleted, or the cache moved) fails the job with a KernelError naming the entry."""
    text = (Path(__file__).resolve().parents[2] / "examples" / "mlp.mlir").read_text()
    graph = slicer.compile(text, mesh=slicer.Mesh(x=2), tactics=[slicer.Tile(arg=0, dim=0, axes="x")]).graph
    (result,), _ = launch(graph, tmp_path, 2)
    assert np.isfinite(result).all()
    sources = json.loads((tmp_path / KERNELS_FILE).read_text())
    for source in sources["kernels"].values():
        source["cache"] = str(tmp_path / "no-cache")
    (tmp_path / KERNELS_FILE).write_text(json.dumps(sources))
    result = run_spmd(2, [sys.executable, "-m", "slicer.runtime.job", str(tmp_path)], timeout=60)
    assert result.returncode != 0
    assert "KernelError: kernel cache entry" in result.stderr and "it does not exist" in result.stderr
