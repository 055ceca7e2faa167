"""`benchmarks/collectives.py` keeps running (2 ranks, tiny sizes, without XLA), with the JSON fields the
README's tables are built from; `benchmarks/xla_reshard.py` reads Slicer's type text as JAX specs."""

import importlib.util
import json
import pathlib
import subprocess
import sys

BENCHMARKS = pathlib.Path(__file__).parents[2] / "benchmarks"


def test_collectives_benchmark_smoke(tmp_path):
    out = tmp_path / "collectives.json"
    done = subprocess.run([sys.executable, str(BENCHMARKS / "collectives.py"), "--ranks", "2", "--rounds", "1",
                           "--reps", "1", "--inner", "1", "--kib", "16", "--mib", "0.25", "--no-xla", "--json",
                           str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (result,) = json.loads(out.read_text())["results"]
    assert result["ranks"] == 2 and result["xla_skipped"]
    assert {k["kind"] for k in result["kinds"]} == {"all_gather", "all_to_all", "all_reduce", "reduce_scatter",
                                                     "all_slice"}
    for row in result["kinds"] + [s for r in result["reshards"] for s in r["steps"]]:
        assert len(row["breakdown"]) == 4 and min(row["breakdown"]) >= 0
    assert len(result["reshards"]) == 6 and all(r["slicer_s"] > 0 for r in result["reshards"])
    compared = subprocess.run([sys.executable, str(BENCHMARKS / "collectives.py"), "--compare", str(out), str(out)],
                              capture_output=True, text=True, timeout=60, check=True).stdout
    assert "| 2 | all_gather | contiguous |" in compared and "Per step" in compared


def test_xla_helper_reads_slicer_types():
    spec = importlib.util.spec_from_file_location("xla_reshard", BENCHMARKS / "xla_reshard.py")
    xla = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(xla)
    assert xla.parse_type("[[x,y],[]] partial=[z]") == ([("x", "y"), ()], ("z",))
    assert xla.parse_type("[[],[x]]") == ([(), ("x",)], ())
    assert xla.parse_mesh("x=2,y=4") == [("x", 2), ("y", 4)]


def test_asking_whether_jax_is_there_does_not_import_it():
    """Importing JAX fixes its device count: `unavailable()` must leave it to `configure(n)` (a run of
    redistribution_vs_xla.py once failed with 'JAX is already imported with 1 devices')."""
    script = (f"import sys; sys.path.insert(0, {str(BENCHMARKS)!r}); import xla_reshard; "
              "reason = xla_reshard.unavailable(); print('jax' in sys.modules, reason is None or 'bench "
              "extra' in reason)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.split() == ["False", "True"]
