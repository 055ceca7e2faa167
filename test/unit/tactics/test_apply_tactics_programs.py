"""After apply_tactics every program still computes the same thing (run by the JIT) and verifies.

Programs: the examples/ (2-layer MLP, batch matmul, sum reduction, attention,
layernorm, reshape, transpose) and a softmax whose first reduction is a max. Strategies: data parallel (batch dim
over x), Megatron-like (over y) and both at once (2-D), plus results.
"""

from functools import cache
from pathlib import Path

import numpy as np
import pytest

import slicer
import slicer.core.names as names
import slicer.dialect as sd
from slicer.dialect.verifier import verify
from slicer.lowering import compile_function

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
MESH = {"x": 2, "y": 4}

SOFTMAX = (EXAMPLES / "softmax.mlir").read_text()

T, R = slicer.Tile, slicer.Replicate
CASES = {
    "mlp": {
        "data": [T(arg=0, dim=0, axes="x")],
        "megatron": [T(arg=1, dim=1, axes="y"), T(arg=3, dim=0, axes="y")],
        "2d": [T(arg=0, dim=0, axes="x"), T(arg=1, dim=1, axes="y"), T(arg=3, dim=0, axes="y"), R(arg=2)],
    },
    "batch_matmul": {
        "data": [T(arg=0, dim=0, axes="x"), T(arg=1, dim=0, axes="x")],
        "2d": [T(arg=0, dim=0, axes="x"), T(arg=1, dim=2, axes="y"), T(result=0, dim=1, axes=("y", "x"))],
    },
    "reduction": {
        "rows": [T(arg=0, dim=0, axes="x")],
        "2d": [T(arg=0, dim=0, axes="x"), T(arg=0, dim=1, axes="y"), T(result=0, dim=0, axes=("x", "y"))],
    },
    "attention": {
        "rows": [T(arg=0, dim=0, axes="x")],
        "heads-like": [T(arg=0, dim=1, axes="y"), T(arg=1, dim=1, axes="y"), T(arg=2, dim=0, axes=("x", "y"))],
    },
    "layernorm": {
        "2d": [T(arg=0, dim=0, axes="x"), T(arg=0, dim=1, axes="y"), T(arg=1, dim=0, axes="y"), R(arg=2)],
    },
    "reshape": {"rows": [T(arg=0, dim=0, axes="x"), T(result=0, dim=0, axes=("x", "y"))]},
    "transpose": {"2d": [T(arg=0, dim=0, axes="x"), T(arg=1, dim=1, axes="y")]},
    "softmax": {
        "rows": [T(arg=0, dim=0, axes="x"), R(result=0)],
        "2d": [T(arg=0, dim=0, axes="x"), T(arg=0, dim=1, axes="y"), T(result=0, dim=1, axes="x")],
    },
}


def program(name: str) -> str:
    return SOFTMAX if name == "softmax" else (EXAMPLES / f"{name}.mlir").read_text()


@cache
def original(name: str):
    """The unpartitioned program, compiled once, and random inputs for it."""
    fn = compile_function(program(name))
    rng = np.random.default_rng(len(name))
    inputs = [rng.standard_normal(spec.shape).astype(spec.dtype) for spec in fn.inputs]
    return inputs, fn(*inputs)


@pytest.mark.parametrize("name, strategy", [(n, s) for n, strategies in CASES.items() for s in strategies])
def test_tactics_give_an_equal_program(name, strategy):
    tactics = CASES[name][strategy]
    module = slicer.apply_tactics(program(name), tactics, mesh=MESH)
    assert [f"{d.message}" for d in verify(module)] == []
    loops = [sd.LoopOp(op) for op in sd.walk_ops(module.operation, names.LOOP)]
    tiles = [t for t in tactics if isinstance(t, slicer.Tile)]
    assert len(loops) == len(tiles)
    assert sorted((lp.action.dim, lp.range.axes) for lp in loops) == sorted((t.dim, t.axes) for t in tiles)
    # consumers now read the loops: the loop results are used, the tiled/replicated arguments only by the
    # slices (or annotation) that rebuild them
    assert all(list(lp.results[0].uses) for lp in loops)
    (func,) = [op for op in sd.walk_ops(module.operation, "func.func")]
    for index in {t.arg for t in tactics if t.arg is not None}:
        users = {use.owner.operation.name for use in func.regions[0].blocks[0].arguments[index].uses}
        assert users <= {names.SLICE, names.ANNOTATE}, users
    annotations = list(sd.walk_ops(module.operation, names.ANNOTATE))
    assert len(annotations) == sum(isinstance(t, slicer.Replicate) for t in tactics)

    inputs, expected = original(name)
    np.testing.assert_allclose(compile_function(module)(*inputs), expected, rtol=1e-5, atol=1e-5)


def test_original_programs_compute_what_they_say():
    """The reference outputs above are right (so equality with them means something)."""
    (x, w1, b1, w2), y = original("mlp")
    np.testing.assert_allclose(y, np.maximum(x @ w1 + b1, 0) @ w2, rtol=1e-4, atol=1e-4)
    (a, w), c = original("batch_matmul")
    np.testing.assert_allclose(c, a @ w, rtol=1e-4, atol=1e-4)
    (a,), s = original("reduction")
    np.testing.assert_allclose(s, a.sum(axis=1), rtol=1e-5, atol=1e-5)
    (a,), g = original("reshape")
    np.testing.assert_allclose(g, a.reshape(8, 4, 4).sum(axis=2).reshape(32), rtol=1e-5, atol=1e-5)
    (a, b), c = original("transpose")
    np.testing.assert_allclose(c, a.T @ b, rtol=1e-4, atol=1e-4)
    (x, gamma, beta), y = original("layernorm")
    mean, var = x.mean(axis=1, keepdims=True), x.var(axis=1, keepdims=True)
    np.testing.assert_allclose(y, (x - mean) / np.sqrt(var + 1e-5) * gamma + beta, rtol=1e-4, atol=1e-4)
    (q, k, v), o = original("attention")
    s = q @ k.T
    w = np.exp((s - s.max(axis=1, keepdims=True)) * 0.25)
    np.testing.assert_allclose(o, (w / w.sum(axis=1, keepdims=True)) @ v, rtol=1e-4, atol=1e-4)
    (a,), p = original("softmax")
    e = np.exp(a - a.max(axis=1, keepdims=True))
    np.testing.assert_allclose(p, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)
