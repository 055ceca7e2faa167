"""Partitioned programs compiled and run on real MPI ranks equal the single-process program;
slicer-run's errors are clear, exit non-zero and never hang (every run has a timeout)."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import slicer
from rank_faults import kill_env
from slicer.lowering import compile_function

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


TIMED = {"mlp-2", "mha-4", "batch_matmul-2x2x2"}
"""The cases run timed, on a job of their own (`launch`: 2, 4 and 8 ranks, a 1-D, 2-D and 3-D mesh); the others
run untimed on the kept job of their rank count (`SLICER_KEEP_RANKS=1`, test/conftest.py: the same executor on
every rank, without starting 8 ranks for each case)."""


@pytest.mark.parametrize("example,mesh,tactics", CASES,
                         ids=[f"{c[0]}-{'x'.join(map(str, c[1].values()))}-{c[2]}" for c in CASES])
def test_runs_on_mpi_ranks_equal_the_single_process_program(example, mesh, tactics):
    text = (EXAMPLES / f"{example}.mlir").read_text()
    prog = slicer.compile(text, mesh=slicer.Mesh(**mesh), tactics=slicer.parse_tactics(tactics))
    reference = compile_function(text)
    rng = np.random.default_rng(len(example))
    inputs = [rng.standard_normal(s.shape).astype(s.dtype) for s in reference.inputs]
    ranks = prog.mesh.device_count
    if f"{example}-{'x'.join(map(str, mesh.values()))}" not in TIMED:
        np.testing.assert_allclose(prog.run(*inputs, ranks=ranks, timeout=240), reference(*inputs), rtol=1e-5,
                                   atol=1e-5)
        return
    got, timings = prog.run(*inputs, ranks=ranks, timeout=240, return_timings=True)
    np.testing.assert_allclose(got, reference(*inputs), rtol=1e-5, atol=1e-5)
    assert timings.ranks == ranks and timings.repeat == 1
    assert [s.kind for s in timings.steps] == ["collective" if hasattr(n,
                                                                       "step") else "kernel" for n in prog.graph.nodes]
    assert len(timings.events) == ranks


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
                      "--inputs", ",".join(files), "--output", str(out), "--check")
    assert done.returncode == 0, done.stderr
    assert "results match the unpartitioned program" in done.stdout
    assert "shard.all_reduce over [y]" in done.stdout
    expected = compile_function((EXAMPLES / "mlp.mlir").read_text())(*[np.load(f) for f in files])
    np.testing.assert_allclose(np.load(out / "result0.npy"), expected, rtol=1e-5, atol=1e-5)


def test_auto_searches_the_tactics_and_runs_them(tmp_path):
    """--auto on 2 ranks: the batch of the MLP in test/Transforms/slicer-auto.mlir is large, so data parallel."""
    done = slicer_run(str(ROOT / "test" / "Transforms" / "slicer-auto.mlir"), "--mesh", "x=2", "--auto", "--random",
                      "3", "--check")
    assert done.returncode == 0, done.stderr
    assert "== slicer.auto chose: arg0.0=x" in done.stdout and "runner-up" in done.stdout
    assert "results match the unpartitioned program" in done.stdout


def test_missing_input_file(tmp_path):
    done = slicer_run(str(EXAMPLES / "reduction.mlir"), "--mesh", "x=2", "--tactic", "arg0.0=x", "--inputs",
                      str(tmp_path / "nope.npy"))
    assert done.returncode == 2  # a file named on the command line that cannot be read: a usage error
    assert "slicer-run: error: input file" in done.stderr and "nope.npy' (argument #0) does not exist" in done.stderr


def test_wrong_shaped_input_file(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((8, 15), np.float32))
    done = slicer_run(str(EXAMPLES / "reduction.mlir"), "--mesh", "x=2", "--tactic", "arg0.0=x", "--inputs",
                      str(tmp_path / "a.npy"))
    assert done.returncode == 1  # readable, but not what the program takes: found after compiling
    assert "holds float32[8, 15], but argument #0 of @row_sum is float32[8, 16]" in done.stderr


def test_mpiexec_not_found():
    done = slicer_run(str(EXAMPLES / "reduction.mlir"), "--mesh", "x=2", "--tactic", "arg0.0=x",
                      "--mpiexec", "/nonexistent/mpiexec")
    assert done.returncode == 1
    assert "slicer-run: error: mpiexec '/nonexistent/mpiexec' not found" in done.stderr


def test_a_rank_killed_mid_run_stops_the_job():
    done = slicer_run(str(EXAMPLES / "mlp.mlir"), "--mesh", "x=2,y=2", "--tactic", "arg0.0=x", "--tactic", "arg1.1=y",
                      env=kill_env("3:run"))
    assert done.returncode == 1
    assert "of the job of 4 ranks went away" in done.stderr and "the job was ended" in done.stderr
    assert "slicer rank 3: killed by" in done.stderr


@pytest.mark.slow
def test_under_mpiexec_directly(tmp_path):
    """The same command inside an mpiexec job runs on its ranks (slicer.runtime.jobs.in_job); a job of the wrong
    size is a usage error."""
    from slicer.runtime.jobs.mpiexec import find_mpiexec

    command = [sys.executable, "-m", "slicer.runtime", str(EXAMPLES / "mlp.mlir"), "--mesh", "x=2", "--tactic",
               "arg0.0=x", "--random", "5"]
    environment = {**os.environ, "SLICER_COLLECTIVES": "nccl", "SLICER_OVERLAP": "sometimes"}
    done = subprocess.run([find_mpiexec(), "-n", "2", *command, "--check", "-o", str(tmp_path / "out"),
                           "--collectives", "mpi", "--overlap", "off"],
                          capture_output=True, text=True, timeout=240, env=environment)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("results match the unpartitioned program") == 1
    assert (tmp_path / "out" / "result0.npy").is_file()
    wrong = subprocess.run([find_mpiexec(), "-n", "2", *command[:5], "x=4"], capture_output=True, text=True,
                           timeout=240)
    assert wrong.returncode == 2
    assert "slicer-run: error: this MPI job has 2 ranks but the mesh x=4 has 4 devices" in wrong.stderr


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


@pytest.mark.parametrize("content", [b"not a numpy file", None], ids=["garbage", "truncated"])
def test_unreadable_input_file(tmp_path, content):
    path = tmp_path / "a.npy"
    np.save(path, np.zeros((8, 16), np.float32))
    path.write_bytes(content if content is not None else path.read_bytes()[:200])
    done = slicer_run(str(EXAMPLES / "reduction.mlir"), "--mesh", "x=2", "--tactic", "arg0.0=x", "--inputs", str(path))
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert f"slicer-run: error: input file '{path}' (argument #0) is not a readable .npy file" in done.stderr


def test_check_treats_nan_in_the_same_places_as_equal(tmp_path):
    a = np.ones((8, 16), np.float32)
    a[3, 5] = np.nan
    np.save(tmp_path / "a.npy", a)
    done = slicer_run(str(EXAMPLES / "reduction.mlir"), "--mesh", "x=2", "--tactic", "arg0.1=x", "--inputs",
                      str(tmp_path / "a.npy"), "--check")
    assert done.returncode == 0, done.stderr
    assert "results match the unpartitioned program" in done.stdout
    assert np.isnan(np.load(next(Path(line.split(": ")[1]) for line in done.stdout.splitlines()
                                 if line.startswith("== results:"))))[3]


def test_more_ranks_than_cores_need_oversubscribe():
    import os

    env = {k: v for k, v in os.environ.items() if k != "SLICER_OVERSUBSCRIBE"}
    done = subprocess.run([sys.executable, "-m", "slicer.runtime", str(EXAMPLES / "reduction.mlir"), "--mesh",
                           "x=1024", "--random", "0"], capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 1
    assert "1024 ranks on this host's" in done.stderr and "--oversubscribe" in done.stderr


def test_zero_dimensional_values_on_ranks():
    text = (ROOT / "test" / "unit" / "reliability" / "Inputs" / "scale_by_total.mlir").read_text()
    prog = slicer.compile(text, mesh=slicer.Mesh(x=2), tactics=[slicer.Tile(arg=1, dim=0, axes="x")])
    rng = np.random.default_rng(3)
    s, b = np.asarray(rng.standard_normal(), np.float32), rng.standard_normal((4, 6)).astype(np.float32)
    total, scaled = prog.run(s, b, ranks=2, timeout=240)
    assert total.shape == ()
    np.testing.assert_allclose(total, b.astype(np.float64).sum(), rtol=1e-5)
    np.testing.assert_allclose(scaled, s * b, rtol=1e-6)


def test_killing_the_launcher_ends_the_job(tmp_path):
    """No rank outlives slicer-run: SIGTERM (and SIGKILL) of the launching process end its MPI job."""
    import os
    import signal
    import time

    marker = f"slicer-orphan-test-{os.getpid()}"
    launcher = (f"from slicer.runtime.jobs.mpiexec import run_spmd; import sys; "
                f"run_spmd(2, [sys.executable, '-c', 'import time; time.sleep(120)', '{marker}'])")
    for sig in (signal.SIGTERM, signal.SIGKILL):
        process = subprocess.Popen([sys.executable, "-c", launcher])
        deadline = time.time() + 60
        while time.time() < deadline and not _processes_with(marker):
            time.sleep(0.2)
        assert _processes_with(marker), "the ranks never started"
        process.send_signal(sig)
        process.wait(timeout=30)
        deadline = time.time() + 90  # Hydra's proxies end the ranks; on a loaded 2-core host that took over 30 s
        while time.time() < deadline and _processes_with(marker):
            time.sleep(0.2)
        assert not _processes_with(marker), f"ranks survived {sig.name} of the launcher"


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found
