"""`benchmarks/auto.py` keeps running: at toy size, the MLP on 2 ranks, slicer.auto against the hand-written
strategy (data parallel: one MPI launch, the test stays short); the JSON has the chosen tactics, the search time,
predicted and measured times and peaks."""

import json
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

BENCHMARKS = pathlib.Path(__file__).parents[2] / "benchmarks"


def test_auto_benchmark_smoke(tmp_path):
    out = tmp_path / "auto.json"
    done = subprocess.run([sys.executable, str(BENCHMARKS / "auto.py"), "--small", "--cases", "mlp", "--meshes", "2",
                           "--repeat", "1", "--rounds", "1", "--hand", "data", "--json", str(out)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert rows and rows[0]["case"] == "mlp" and rows[0]["budget"] is None
    auto, hand = rows[0]["auto"], rows[0]["hand"]
    assert auto["tactics"] == "input.0=x" and auto["same_as"] == "data"  # a large batch of tokens: data parallel
    assert 0 < auto["search_s"] < 10 and auto["measured_s"] > 0 and auto["predicted_s"] > 0
    assert set(hand) == {"data"} and hand["data"]["peak_bytes"] > 0 and hand["data"]["measured_s"] > 0
    assert rows[0]["ratio"] == 1.0 and rows[0]["within_budget"]
    assert "| mlp | 2 | none | `input.0=x` |" in done.stdout
