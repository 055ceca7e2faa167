"""The slicer-plan command line: text and JSON output, --check, the cost model's options, --calibrate,
errors."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slicer.tools import slicer_plan

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))  # the reshard suite
from reshard_suite import cases


def run(*args):
    return subprocess.run([sys.executable, "-m", "slicer.tools.slicer_plan", *args],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.slow
def test_text_output():
    r = run("--mesh", "x=2,y=4", "--shape", "1024x1024", "--src", "[[x],[y]]", "--dst", "[[y],[x]]")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert any("all_to_all" in line and "->" in line for line in lines)
    assert "lower bound" in lines[-2] and "estimated time" in lines[-1]


@pytest.mark.slow
def test_json_output_and_check():
    r = run("--mesh", "x=2,y=2", "--shape", "8x8", "--dtype", "f64", "--src", '[["x"], ["y"]]',
            "--dst", "[[y],[x]]", "--json", "--check")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert set(d) == {"mesh", "shape", "dtype", "src", "dst", "steps", "bytes_received_per_device",
                      "bytes_received_total", "peak_bytes_per_device", "lower_bound_bytes_per_device",
                      "estimated_seconds", "cost_model"}
    assert d["mesh"] == "x=2,y=2" and d["shape"] == "8x8" and d["dtype"] == "f64"
    (step,) = d["steps"]
    assert step.pop("estimated_seconds") == pytest.approx(30e-6 + 128 / 2e9)  # the built-in figures
    assert step == {"op": "permute", "pairs": [[1, 2], [2, 1]], "type_after": "[[y],[x]]",
                    "bytes_received_per_device": 128}
    assert d["cost_model"]["objective"] == "time" and d["cost_model"]["source"] == "built-in"
    assert d["bytes_received_per_device"] == d["lower_bound_bytes_per_device"] == 128
    assert d["peak_bytes_per_device"] == 256 and d["bytes_received_total"] == 256
    assert "check: ok" in r.stderr


@pytest.mark.parametrize("args, words", [
    (["--src", "[[q],[]]", "--dst", "[[x],[]]"], "unknown mesh axis 'q'"),
    (["--src", "[[x],[x]]", "--dst", "[[x],[]]"], "used twice"),
    (["--src", "[[x]]", "--dst", "[[x],[]]"], "rank 2"),
    (["--src", "[[x],[]]", "--dst", "[[x],[]]", "--dtype", "f8"], "element type f8 is not supported"),
    (["--src", "[[x],[]]", "--dst", "[[x],[]]", "--shape", "6x8"], "not divisible"),
    (["--src", "[[x],[]"], "required"),
    (["--src", "[[x:(1)3],[]]", "--dst", "[[x],[]]"], "does not fit axis 'x'"),
    (["--src", "[[x],[]]", "--dst", "[[x],[]]", "--bandwidth", "0"], "positive number of bytes per second"),
    (["--src", "[[x],[]]", "--dst", "[[x],[]]", "--axis-latency", "x"], "write AXIS=NUMBER"),
    (["--src", "[[x],[]]", "--dst", "[[x],[]]", "--cost-model", "/nonexistent.json"], "cannot read the cost model"),
])
def test_bad_command_lines_exit_2(args, words, capsys):
    # main() in this process, as the console script runs it (the tests above run the script itself): a process
    # per case was most of this test's time. An exception other than the usage error fails the test.
    base = {"--mesh": "x=4,y=2", "--shape": "8x8"}
    argv = list(args)
    for k, v in base.items():
        if k not in argv:
            argv += [k, v]
    try:
        code = slicer_plan.main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2
    assert "slicer-plan: error:" in err and words in err and "Traceback" not in err


def test_check_passes_on_the_benchmark_suite(capsys):
    # in this process (main() is what the console script runs): the suite has 32 cases
    for devices in (4, 8):
        for case in cases(devices, 1 << 14):
            code = slicer_plan.main(["--mesh", str(case.mesh), "--shape", "x".join(map(str, case.shape)),
                                     "--src", str(case.src), "--dst", str(case.dst), "--check", "--json"])
            out, err = capsys.readouterr()
            assert code == 0, (case.name, err)
            assert json.loads(out)["src"] == str(case.src) and "check: ok" in err


@pytest.mark.slow
def test_cost_options():
    base = ["--mesh", "x=2,y=4", "--shape", "1024x1024", "--src", "[[x],[y]]", "--dst", "[[y],[x]]", "--json"]
    time = json.loads(run(*base).stdout)
    assert time["bytes_received_per_device"] == 768 * 1024  # sub-axes: at most what XLA receives
    whole = json.loads(run(*base, "--no-sub-axes").stdout)
    assert whole["bytes_received_per_device"] == 960 * 1024
    slow = json.loads(run(*base, "--latency", "1e-3", "--axis-bandwidth", "x=1e8", "--axis-latency", "y=2e-3").stdout)
    assert slow["cost_model"]["latency_s"] == 1e-3 and slow["cost_model"]["axis_bandwidth_bytes_per_s"] == {"x": 1e8}
    assert slow["estimated_seconds"] > time["estimated_seconds"]
    bytes_ = json.loads(run(*base, "--cost", "bytes").stdout)
    assert (
        bytes_["cost_model"]["objective"] == "bytes" and bytes_["bytes_received_total"] <= time["bytes_received_total"]
    )


@pytest.mark.slow
def test_calibrate_stores_figures_that_plans_use(tmp_path):
    out = tmp_path / "model.json"
    r = subprocess.run([sys.executable, "-m", "slicer.tools.slicer_plan", "--calibrate", "links", "-n", "2",
                        "--mesh", "x=2", "-o", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    data = json.loads(out.read_text())
    assert data["latency_s"] > 0 and data["bandwidth_bytes_per_s"] > 0 and set(data["axis_latency_s"]) == {"x"}
    d = json.loads(run("--mesh", "x=2", "--shape", "8", "--src", "[[x]]", "--dst", "[[]]", "--json",
                       "--cost-model", str(out)).stdout)
    assert d["cost_model"]["latency_s"] == data["latency_s"] and str(out) in d["cost_model"]["source"]
    bad = subprocess.run([sys.executable, "-m", "slicer.tools.slicer_plan", "--calibrate", "--ranks", "4",
                          "--mesh", "x=2"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "has 2 devices but --ranks is 4" in bad.stderr


@pytest.mark.slow
def test_calibrate_kernels_stores_the_figures_the_search_reads(tmp_path):
    """`--calibrate kernels`: the probes run on the ranks, the fitted figures are stored and read back by
    `Machine.default` through $SLICER_MACHINE; each probe is reported with the fit's error on it. (One round of
    the probes: the default three took 45 s of the suite under its load.)"""
    from slicer.automatic.machine import FIGURES, Machine

    out = tmp_path / "machine.json"
    r = subprocess.run([sys.executable, "-m", "slicer.tools.slicer_plan", "--calibrate", "kernels", "-n", "2",
                        "--rounds", "1", "--machine-output", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    stored = json.loads(out.read_text())
    assert set(FIGURES) <= set(stored) and all(stored[name] > 0 for name in FIGURES)
    assert "matmul 512^3:" in r.stdout and f"stored in {out}" in r.stdout
    env = {**os.environ, "SLICER_MACHINE": str(out)}
    read = subprocess.run([sys.executable, "-c", "from slicer.automatic import Machine; "
                           "print(Machine.default().contraction_flops)"], capture_output=True, text=True, env=env)
    assert float(read.stdout) == stored["contraction_flops"] != Machine().contraction_flops
    bad = subprocess.run([sys.executable, "-m", "slicer.tools.slicer_plan", "--calibrate", "everything"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "invalid choice: 'everything'" in bad.stderr
    bad = subprocess.run([sys.executable, "-m", "slicer.tools.slicer_plan", "--calibrate", "kernels", "--rounds", "0"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--rounds 0: give 1 or more rounds" in bad.stderr, bad.stderr
