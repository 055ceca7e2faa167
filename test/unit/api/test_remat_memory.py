"""`slicer.compile` with a `Remat` tactic on the two-block step of test/Transforms/slicer-remat.mlir (data
parallel on x=2): the partitioned step is rewritten after partitioning, computes what it did without remat
(the simulator, random inputs), and `memory()` reports per module what stays saved and what is recomputed, with
the peak with and without."""

from pathlib import Path

import numpy as np
import pytest

import slicer

TWO_BLOCKS = (Path(__file__).resolve().parents[2] / "Transforms" / "slicer-remat.mlir").read_text().split("// -----")[0]
DATA = [slicer.Tile(arg=0, dim=0, axes="x"), slicer.Tile(arg=3, dim=0, axes="x")]


@pytest.mark.parametrize("policy, saved, recomputed", [("full", 64, 256), ("save_dots", 192, 128)])
def test_memory_reports_saved_and_recomputed_per_module(policy, saved, recomputed):
    prog = slicer.compile(TWO_BLOCKS, mesh=slicer.Mesh(x=2), tactics=DATA + [slicer.Remat(pattern="blocks.*",
                                                                                         policy=policy)])
    plain = slicer.compile(TWO_BLOCKS, mesh=slicer.Mesh(x=2), tactics=DATA)
    report = prog.memory().remat
    assert [u.name for u in report.units] == ["blocks.0", "blocks.1"]
    assert (report.saved, report.recomputed) == (saved, recomputed)  # bytes per device (blocks of 2x8 f32)
    assert report.peak_without == plain.memory().peak and report.peak == prog.memory().peak
    text = prog.memory().text()
    assert "rematerialisation" in text and f"blocks.0  {policy}" in text
    assert plain.memory().remat is None
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in ((4, 8), (8, 8), (8, 8), (4, 8))]
    for got, want in zip(prog.run(*inputs), plain.run(*inputs), strict=True):
        np.testing.assert_array_equal(got, want)
