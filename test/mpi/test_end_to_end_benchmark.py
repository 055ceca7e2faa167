"""`benchmarks/end_to_end.py` keeps running: its three programs at toy sizes (`--small`) on 1 and 2 ranks
next to numpy, without JAX, with the JSON fields its README tables come from (it once broke silently when
the runtime's step timings became events)."""

import json
import pathlib
import subprocess
import sys

BENCHMARKS = pathlib.Path(__file__).parents[2] / "benchmarks"


def test_end_to_end_benchmark_smoke(tmp_path):
    out = tmp_path / "e2e.json"
    done = subprocess.run([sys.executable, str(BENCHMARKS / "end_to_end.py"), "--small", "--reps", "2", "--no-jax",
                           "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())
    assert results["sizes"]["D"] == 32  # the toy sizes reached the workers too
    assert set(results["programs"]) == {"mlp_relu", "mlp_gelu", "mha"}
    for name, entry in results["programs"].items():
        assert set(entry) == {"numpy_1t", "numpy_2t", "slicer_1r", "slicer_2r"}, name
        for ranks in ("slicer_1r", "slicer_2r"):
            assert entry[ranks]["relative_error"] < 1e-3 and len(entry[ranks]["times"]) == 2
            kinds = [label.split()[0] for label, seconds in entry[ranks]["steps"] if seconds >= 0]
            assert "kernel" in kinds
        assert any(label.startswith("wait all_reduce") for label, _ in entry["slicer_2r"]["steps"]), name
    assert results["compile"]["cached"]["total"] > 0
    assert "| mlp_relu |" in done.stdout
