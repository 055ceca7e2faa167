"""The collectives report: one entry per collective with its axes, bytes received per device and provenance;
results say whether their type was requested or is the default."""

import subprocess
import sys
from pathlib import Path

import pytest
from mlir import ir

from slicer.dialect import make_context
from slicer.passes import transform
from slicer.spmd.report import report

ROOT = Path(__file__).resolve().parents[3]


def partition(module, pipeline: str = "slicer-partition", **options) -> str:
    """`pipeline` (default: slicer-partition) on a copy of `module`; the result's text."""
    return transform(module, pipeline, **options)


def report_of(text: str):
    with make_context():
        return report(ir.Module.parse(partition(text, debug_info=True)))


def test_megatron_report():
    rep = report_of((ROOT / "examples" / "megatron_mlp_loops.mlir").read_text())
    (entry,) = rep.collectives
    assert entry.op == "shard.all_reduce" and entry.mesh_axes == ("y",)
    # ring all_reduce of a 64x128 f32 block over 4 devices: 2 * 3/4 * 32 KiB
    assert entry.bytes_received_per_device == 2 * 3 * 64 * 128 * 4 // 4
    assert "partial sums of the sum loop over [y]" in entry.why
    assert len(entry.places) >= 2  # the return that needs it, the loop that produced the partial sums
    (result,) = rep.results
    assert (result.dist, result.source) == ("[[],[]]", "default")
    assert "default: the propagated type" in rep.text()


def test_requested_result_and_permute_bytes():
    lit = (ROOT / "test" / "Transforms" / "slicer-partition.mlir").read_text()
    case = next(c for c in lit.split("// -----") if "@reshard_2x2(" in c)
    rep = report_of(case)
    (entry,) = rep.collectives
    assert entry.op == "slicer.permute"
    assert entry.bytes_received_per_device == 4 * 8 * 4  # the whole 4x8 f32 block
    assert rep.results[0].source == "requested"
    assert "result #0 of @reshard_2x2 is requested as [[y],[x]]" in entry.why


@pytest.mark.slow
def test_slicer_opt_flag(tmp_path):
    done = subprocess.run([sys.executable, "-m", "slicer.tools.slicer_opt",
                           str(ROOT / "examples" / "data_parallel_mlp_loops.mlir"), "-p", "slicer-partition",
                           "--print-collectives"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "no collectives" in done.stderr and "total: 0 collectives, 0 B received per device" in done.stderr
    assert "shard.grid @mesh" in done.stdout


def test_conflict_provenance():
    """A conflict recorded by slicer-propagate is quoted in the collective it causes, with the tactic."""
    text = (ROOT / "examples" / "mlp.mlir").read_text()
    pipeline = "slicer-apply-tactics{mesh=x=2,y=4 tactics=arg0.0=x;arg1.0=x},slicer-propagate,slicer-partition"
    spmd = partition(text, pipeline, debug_info=True)
    with make_context():
        rep = report(ir.Module.parse(spmd))
    gathers = [c for c in rep.collectives if "conflicting tactics" in c.why]
    assert gathers, rep.text()
    assert "Tile(arg=1, dim=0, axes='x')" in gathers[0].why
    assert any("Tile(arg=1, dim=0, axes='x')" in str(p) for p in gathers[0].places)
