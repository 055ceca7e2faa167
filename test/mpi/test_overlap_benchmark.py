"""`benchmarks/overlap.py` keeps running: the MLP whole and in 2 chunks at toy sizes, one run each, results
checked equal inside the script, the table and JSON written."""

import json
import pathlib
import subprocess
import sys

BENCHMARKS = pathlib.Path(__file__).parents[2] / "benchmarks"


def test_overlap_benchmark_smoke(tmp_path):
    out = tmp_path / "overlap.json"
    done = subprocess.run([sys.executable, str(BENCHMARKS / "overlap.py"), "--small", "--reps", "1", "--rounds", "1",
                           "--variants", "whole,chunks2", "--json", str(out)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(out.read_text())["sizes"] == [16, 32, 64]
    assert "| chunks2 | 2 |" in done.stdout and "| whole | 1 |" in done.stdout
