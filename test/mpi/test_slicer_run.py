"""Partitioned programs compiled and run on real MPI ranks equal the single-process program;
slicer-run's errors are clear, exit non-zero and never hang (every run has a timeout)."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import slicer
from slicer.lowering import compile_function
from slicer.runtime.rank import FAIL_RANK_ENV

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

# (example, mesh, tactics): 2, 4 and 8 ranks, 1-D, 2-D and 3-D meshes.
CASES = [
    ("mlp", {"x": 2}, "arg0.0=x"),
    ("mlp", {"y": 4}, "arg1.1=y;arg3.0=y"),
    ("mlp", {"x": 2, "y": 2}, "arg0.0=x;arg1.1=y;arg3.0=y"),
    ("mlp", {"x": 2, "y": 4}, "arg0.0=x;arg1.1=y;arg3.0=y"),
    ("mha", {"y": 4}, "arg1.1=y;arg2.1=y;arg3.1=y;arg4.0=y"),
    ("mha", {"x": 2}, "arg0.0=x"),
    ("mha", {"x": 2, "y": 4}, "arg0.0=x;arg1.1=y;arg2.1=y;arg3.1=y;arg4.0=y"),
    ("attention", {"x": 4}, "arg0.0=x"),
    ("layernorm", {"x": 8}, "arg0.0=x"),
    ("layernorm", {"y": 4}, "arg0.1=y"),
    ("batch_matmul", {"x": 4}, "arg0.0=x"),
    ("batch_matmul", {"x": 2, "y": 4}, "arg0.0=x;arg1.2=y"),
    ("batch_matmul", {"x": 2, "y": 2, "z": 2}, "arg0.0=x;arg0.1=y;arg1.2=z"),
    ("reduction", {"x": 2}, "arg0.0=x"),
    ("reduction", {"y": 8}, "arg0.1=y"),
    ("reshape", {"x": 4}, "arg0.0=x"),
    ("transpose", {"x": 2}, "arg0.0=x"),
]


@pytest.mark.parametrize("example,mesh,tactics", CASES, ids=[f"{c[0]}-{'x'.join(map(str, c[1].values()))}-{c[2]}" for c in CASES])
def test_runs_on_mpi_ranks_equal_the_single_process_program(example, mesh, tactics):
    text = (EXAMPLES / f"{example}.mlir").read_text()
    prog = slicer.compile(text, mesh=slicer.Mesh(**mesh), tactics=slicer.parse_tactics(tactics))
    reference = compile_function(text)
    rng = np.random.default_rng(len(example))
    inputs = [rng.standard_normal(s.shape).astype(s.dtype) for s in reference.inputs]
    got = prog.run(*inputs, ranks=prog.mesh.device_count, timeout=240)
    np.testing.assert_allclose(got, reference(*inputs), rtol=1e-5, atol=1e-5)
    assert prog.last_timings["ranks"] == prog.mesh.device_count


def slicer_run(*args, env=None, timeout=240):
    import os

    return subprocess.run([sys.executable, "-m", "slicer.runtime", *args], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ, **(env or {})))


def test_cli_with_input_files_out_dir_and_check(tmp_path):
    rng = np.random.default_rng(1)
    shapes = [(8, 16), (16, 32), (32,), (32, 16)]
    files = []
    for i, shape in enumerate(shapes):
        np.save(tmp_path / f"in{i}.npy", rng.standard_normal(shape).astype(np.float32))
        files.append(str(tmp_path / f"in{i}.npy"))
    out = tmp_path / "out"
    done = slicer_run(str(EXAMPLES / "mlp.mlir"), "--mesh", "y=4", "--tactic", "arg1.1=y", "--tactic", "arg3.0=y",
                      "--inputs", ",".join(files), "--out", str(out), "--check")
    assert done.returncode == 0, done.stderr
    assert "results match the unpartitioned program" in done.stdout
    assert "shard.all_reduce over [y]" in done.stdout
    expected = compile_function((EXAMPLES / "mlp.mlir").read_text())(*[np.load(f) for f in files])
    np.testing.assert_allclose(np.load(out / "result0.npy"), expected, rtol=1e-5, atol=1e-5)


def test_missing_input_file(tmp_path):
    done = slicer_run(str(EXAMPLES / "reduction.mlir"), "--mesh", "x=2", "--tactic", "arg0.0=x", "--inputs",
                      str(tmp_path / "nope.npy"))
    assert done.returncode == 1
    assert "slicer-run: error: input file" in done.stderr and "nope.npy' (argument #0) does not exist" in done.stderr


def test_wrong_shaped_input_file(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((8, 15), np.float32))
    done = slicer_run(str(EXAMPLES / "reduction.mlir"), "--mesh", "x=2", "--tactic", "arg0.0=x", "--inputs",
                      str(tmp_path / "a.npy"))
    assert done.returncode == 1
    assert "holds float32[8, 15], but argument #0 of @row_sum is float32[8, 16]" in done.stderr


def test_mpiexec_not_found():
    done = slicer_run(str(EXAMPLES / "reduction.mlir"), "--mesh", "x=2", "--tactic", "arg0.0=x",
                      "--mpiexec", "/nonexistent/mpiexec")
    assert done.returncode == 1
    assert "slicer-run: error: mpiexec '/nonexistent/mpiexec' not found" in done.stderr


def test_a_rank_killed_mid_run_stops_the_job():
    done = slicer_run(str(EXAMPLES / "mlp.mlir"), "--mesh", "x=2,y=2", "--tactic", "arg0.0=x", "--tactic", "arg1.1=y",
                      env={FAIL_RANK_ENV: "3:run"})
    assert done.returncode == 1
    assert "the SPMD job failed on 4 ranks" in done.stderr
    assert "slicer rank 3: killed by" in done.stderr


def test_under_mpiexec_directly():
    from slicer.runtime.mpiexec import find_mpiexec

    done = subprocess.run([find_mpiexec(), "-n", "2", sys.executable, "-m", "slicer.runtime", str(EXAMPLES / "mlp.mlir"),
                           "--mesh", "x=2", "--tactic", "arg0.0=x", "--random", "5", "--check"],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("results match the unpartitioned program") == 1


def test_second_run_of_the_same_program_compiles_nothing(tmp_path):
    args = [str(EXAMPLES / "mlp.mlir"), "--mesh", "x=2,y=2", "--tactic", "arg0.0=x", "--tactic", "arg1.1=y",
            "--tactic", "arg3.0=y", "--check"]
    env = {"SLICER_CACHE_DIR": str(tmp_path / "cache")}
    first = slicer_run(*args, env=env)
    assert first.returncode == 0, first.stderr
    assert "== kernels: compiled 1 library" in first.stdout
    second = slicer_run(*args, env=env)
    assert second.returncode == 0, second.stderr
    assert "== kernels: all from the cache, nothing compiled" in second.stdout
    assert "kernels: aot, 0 compiled on the ranks" in second.stdout
    assert "results match the unpartitioned program" in second.stdout
