"""slicer.compile / Program: the in-process run, explain(), and errors that say how to fix."""

from pathlib import Path

import numpy as np
import pytest

import slicer
from slicer.lowering import compile_function

MLP = (Path(__file__).resolve().parents[3] / "examples" / "mlp.mlir").read_text()
MEGATRON = [slicer.Tile(arg=1, dim=1, axes="y"), slicer.Tile(arg=3, dim=0, axes="y")]


def test_simulated_run_equals_the_original_and_explain_reports():
    prog = slicer.compile(MLP, mesh=slicer.Mesh(y=4), tactics=MEGATRON)
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in [(8, 16), (16, 32), (32,), (32, 16)]]
    np.testing.assert_allclose(prog.run(*inputs), compile_function(MLP)(*inputs), rtol=1e-5, atol=1e-5)
    report = prog.explain()
    assert "arg #1: f32[16, 32] as [[],[y]] (local [16, 8])" in report
    assert "shard.all_reduce over [y]" in report and "B received per device" in report
    assert "kernel kernel_0" in report


def test_a_mesh_may_be_given_as_axis_sizes():
    """`compile` takes `{axis: size}` as `apply_tactics` does: the same program as with a `Mesh`."""
    assert slicer.compile(MLP, mesh={"y": 4}, tactics=MEGATRON).spmd == \
        slicer.compile(MLP, mesh=slicer.Mesh(y=4), tactics=MEGATRON).spmd


def test_errors_say_how_to_fix():
    prog = slicer.compile(MLP, mesh=slicer.Mesh(y=4), tactics=MEGATRON)
    inputs = [np.zeros(s, np.float32) for s in [(8, 16), (16, 32), (32,), (32, 16)]]
    with pytest.raises(slicer.RunError, match="the mesh y=4 has 4 devices: run with ranks=4"):
        prog.run(*inputs, ranks=2)
    with pytest.raises(slicer.RunError, match=r"argument #2 of @mlp must be float32\[32\], got float64\[32\]"):
        prog.run(inputs[0], inputs[1], np.zeros(32), inputs[3])
    with pytest.raises(slicer.RunError, match="@mlp takes 4 arrays, got 1"):
        prog.run(inputs[0])
    with pytest.raises(slicer.CompileError, match=r"slicer.Mesh\(x=2, y=2\)"):
        slicer.compile(MLP, mesh=4, tactics=MEGATRON)
    with pytest.raises(slicer.CompileError, match=r"mesh \{'y': 0\}: mesh axis 'y' has size 0"):
        slicer.compile(MLP, mesh={"y": 0}, tactics=MEGATRON)
    with pytest.raises(slicer.TacticError, match="unknown mesh axis|not an axis|axis 'z'"):
        slicer.compile(MLP, mesh=slicer.Mesh(y=4), tactics=[slicer.Tile(arg=1, dim=1, axes="z")])


def test_the_simulator_compiles_once_across_runs(monkeypatch, tmp_path):
    """A second simulated `run` compiles nothing: the simulator is kept, its kernels come from the on-disk
    cache (a fresh Program of the same text hits it too, as another process would)."""
    from slicer.lowering import aot, cache_stats

    monkeypatch.setenv("SLICER_CACHE_DIR", str(tmp_path / "cache"))
    prog = slicer.compile(MLP, mesh=slicer.Mesh(y=4), tactics=MEGATRON)
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in [(8, 16), (16, 32), (32,), (32, 16)]]
    first = prog.run(*inputs)
    tools = dict(aot.TOOL_RUNS)
    second = prog.run(*inputs)
    assert aot.TOOL_RUNS == tools and prog.simulator() is prog.simulator()
    np.testing.assert_array_equal(first, second)
    hits = cache_stats().hits
    again = slicer.compile(MLP, mesh=slicer.Mesh(y=4), tactics=MEGATRON)
    np.testing.assert_array_equal(again.run(*inputs), first)
    assert aot.TOOL_RUNS == tools and cache_stats().hits == hits + 1


def test_a_result_laid_out_by_a_result_tactic_says_so():
    """explain() labels a result a result tactic tiled with that tactic, not as the default layout."""
    tiled = slicer.compile(MLP, mesh=slicer.Mesh(x=2), tactics=[slicer.Tile(result=0, dim=0, axes="x")]).explain()
    assert "result #0: [8, 16] as [[x],[]] (tactic Tile(result=0, dim=0, axes='x'))" in tiled
    assert "    result #0: [[x],[]] (tactic Tile(result=0, dim=0, axes='x'))" in tiled
    assert "no sharding was requested" not in tiled
    default = slicer.compile(MLP, mesh=slicer.Mesh(x=2), tactics=[slicer.Tile(arg=0, dim=0, axes="x")]).explain()
    assert "result #0: [[x],[]] (default: the propagated type, partial sums reduced (no sharding was requested))" \
        in default
