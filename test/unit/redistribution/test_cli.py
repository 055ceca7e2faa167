"""The slicer-plan command line: text and JSON output, --check, errors."""

import json
import subprocess
import sys

import pytest

from slicer.redistribution.suite import cases


def run(*args):
    return subprocess.run([sys.executable, "-m", "slicer.tools.slicer_plan", *args],
                          capture_output=True, text=True, timeout=60)


def test_text_output():
    r = run("--mesh", "x=2,y=4", "--shape", "1024x1024", "--src", "[[x],[y]]", "--dst", "[[y],[x]]")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert any("all_to_all" in line and "->" in line for line in lines)
    assert "lower bound" in lines[-2] and "estimated time" in lines[-1]


def test_json_output_and_check():
    r = run("--mesh", "x=2,y=2", "--shape", "8x8", "--dtype", "f64", "--src", '[["x"], ["y"]]',
            "--dst", "[[y],[x]]", "--json", "--check")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert set(d) == {"mesh", "shape", "dtype", "src", "dst", "steps", "bytes_received_per_device",
                      "bytes_received_total", "peak_bytes_per_device", "lower_bound_bytes_per_device"}
    assert d["mesh"] == "x=2,y=2" and d["shape"] == "8x8" and d["dtype"] == "f64"
    assert d["steps"] == [{"op": "permute", "pairs": [[1, 2], [2, 1]], "type_after": "[[y],[x]]",
                           "bytes_received_per_device": 128}]
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
])
def test_errors_exit_1(args, words):
    base = {"--mesh": "x=4,y=2", "--shape": "8x8"}
    argv = list(args)
    for k, v in base.items():
        if k not in argv:
            argv += [k, v]
    r = run(*argv)
    assert r.returncode == 1
    assert "slicer-plan: error:" in r.stderr and words in r.stderr and "Traceback" not in r.stderr


def test_check_passes_on_the_benchmark_suite():
    for devices in (4, 8):
        for case in cases(devices, 1 << 14):
            r = run("--mesh", str(case.mesh), "--shape", "x".join(map(str, case.shape)), "--src", str(case.src),
                    "--dst", str(case.dst), "--check", "--json")
            assert r.returncode == 0, (case.name, r.stderr)
            assert json.loads(r.stdout)["src"] == str(case.src)
