"""Dims that do not divide the mesh, on MPI ranks (docs/partition.md, "Uneven shapes"): the ranks take padded
blocks of the arguments, run the native kernels (masked reductions included) and the collectives on padded
blocks, and rank 0 trims the results; each case equals numpy on random data. Few launches: 2 and 4 ranks."""

import sys
from pathlib import Path

import numpy as np

import slicer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "spmd"))
from test_uneven import EXP_ROW_SUM, RECIPROCAL, mlp, mlp_inputs, mlp_numpy

T, R = slicer.Tile, slicer.Replicate


def test_batch_3_on_2_ranks_gathered_whole():
    prog = slicer.compile(mlp(3, 32), mesh={"x": 2}, tactics=[T(arg=0, dim=0, axes="x"), R(result=0)])
    inputs = mlp_inputs(3, 32, seed=10)
    out = prog.run(*inputs, ranks=2)
    assert out.shape == (3, 16)
    np.testing.assert_allclose(out, mlp_numpy(*inputs), rtol=1e-5, atol=1e-5)


def test_sum_over_padded_columns_on_2_ranks():
    """exp(0) = 1 in the padding of 7 columns over y=2 (blocks 4, 3): the native kernel's masked reduction."""
    prog = slicer.compile(EXP_ROW_SUM.format(R=5, C=7), mesh={"y": 2}, tactics=[T(arg=0, dim=1, axes="y")])
    a = np.random.default_rng(14).standard_normal((5, 7), dtype=np.float32)
    np.testing.assert_allclose(prog.run(a, ranks=2), np.exp(a).sum(axis=1), rtol=1e-5, atol=1e-5)


def test_batch_6_on_4_ranks():
    prog = slicer.compile(mlp(6, 32), mesh={"x": 4}, tactics=[T(arg=0, dim=0, axes="x")])  # blocks 2, 2, 2, 0
    inputs = mlp_inputs(6, 32, seed=11)
    np.testing.assert_allclose(prog.run(*inputs, ranks=4, oversubscribe=True), mlp_numpy(*inputs),
                               rtol=1e-5, atol=1e-5)


def test_megatron_hidden_250_on_4_ranks():
    prog = slicer.compile(mlp(8, 250), mesh={"y": 4}, tactics=[T(arg=1, dim=1, axes="y"), T(arg=3, dim=0, axes="y")])
    inputs = mlp_inputs(8, 250, seed=12)
    np.testing.assert_allclose(prog.run(*inputs, ranks=4, oversubscribe=True), mlp_numpy(*inputs),
                               rtol=1e-4, atol=1e-4)


def test_batch_and_hidden_uneven_on_2x2_ranks_with_masked_contraction():
    """Batch 3 over x and hidden 7 over y; 1/h makes the padding inf, which the masks keep out."""
    tactics = [T(arg=0, dim=0, axes="x"), T(arg=1, dim=1, axes="y"), T(arg=3, dim=0, axes="y"), R(arg=2)]
    prog = slicer.compile(mlp(3, 7, RECIPROCAL), mesh={"x": 2, "y": 2}, tactics=tactics)
    inputs = mlp_inputs(3, 7, seed=13)
    out = prog.run(*inputs, ranks=4, oversubscribe=True)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, mlp_numpy(*inputs, act=RECIPROCAL), rtol=1e-4, atol=1e-3)
