"""`benchmarks/planning.py` keeps running: both suites on a few cases, with the JSON fields the README's
table is built from."""

import json
import pathlib
import subprocess
import sys

BENCHMARK = pathlib.Path(__file__).parents[3] / "benchmarks" / "planning.py"


def test_planning_benchmark_smoke(tmp_path):
    out = tmp_path / "planning.json"
    subprocess.run([sys.executable, str(BENCHMARK), "--cases", "2", "--repeat", "1", "--json", str(out)],
                   check=True, capture_output=True, text=True, timeout=300)
    results = json.loads(out.read_text())
    assert "broad" in results and "2x4x8x3" in results
    assert results["broad"]["cases"] == 20 and results["2x4x8x3"]["cases"] == 2
    for r in results.values():
        assert r["median_ms"] <= r["p90_ms"] <= r["p99_ms"] <= r["max_ms"]
        assert 0 <= r["at_lower_bound"] <= 1 and 0 <= r["normal_form"] <= 1
        assert r["slowest"]
