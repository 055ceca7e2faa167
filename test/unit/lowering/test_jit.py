"""The JIT compiles small functions at -O0 and the rest at `JIT_OPT_LEVEL` (`opt_level_for`): the size counts
every linalg op's iteration space (a matmul's M*N*K, not its M*N outputs), other ops' tensor elements, and the
trips of the loops lowered from slicer loops; a dynamic size is not small. Both levels compute the same."""

import numpy as np
import pytest
from mlir import ir
from test_jit_loops import nested_matmul

from slicer.dialect import make_context
from slicer.lowering import compile_function
from slicer.lowering.jit import JIT_OPT_LEVEL, SMALL_PROGRAM_POINTS, lower_loops, opt_level_for


def matmul(m, k, n, *, dynamic=False):
    rows = "?" if dynamic else m
    a, c = f"tensor<{rows}x{k}xf32>", f"tensor<{rows}x{n}xf32>"
    return f"""
func.func @mm(%a: {a}, %b: tensor<{k}x{n}xf32>, %c: {c}) -> {c} {{
  %r = linalg.matmul ins(%a, %b : {a}, tensor<{k}x{n}xf32>) outs(%c : {c}) -> {c}
  return %r : {c}
}}"""


def elementwise(m, n):
    return f"""
func.func @add(%a: tensor<{m}x{n}xf32>, %b: tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32> {{
  %r = arith.addf %a, %b : tensor<{m}x{n}xf32>
  return %r : tensor<{m}x{n}xf32>
}}"""


def level(text: str) -> int:
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        lower_loops(module.operation)
        return opt_level_for(module)


def test_the_size_is_the_iteration_space_with_the_loops_around_it():
    # 64 * 64 * 1024 = 2^22 iterations: small; one more row of the contraction and it is not.
    assert level(matmul(64, 1024, 64)) == 0
    assert level(matmul(64, 1025, 64)) == JIT_OPT_LEVEL  # outputs alone (4096) would say small
    assert level(elementwise(2048, 2048)) == 0 and level(elementwise(2048, 2049)) == JIT_OPT_LEVEL
    # Tiled over x=2 and summed over y=4, each block's matmul runs 8 times: 8 * (32 * 128 * 64) = 2^21 is small,
    # 8 * (32 * 512 * 64) = 2^23 is not, though one block's 2^20 alone would be.
    assert level(nested_matmul(64, 512, 64, 2, 4)) == 0
    assert level(nested_matmul(64, 2048, 64, 2, 4)) == JIT_OPT_LEVEL
    assert SMALL_PROGRAM_POINTS == 1 << 22


def test_a_dynamic_size_is_not_small():
    assert level(matmul(4, 4, 4, dynamic=True)) == JIT_OPT_LEVEL


@pytest.mark.parametrize("opt_level", [0, JIT_OPT_LEVEL, None])
def test_every_level_computes_the_same(opt_level):
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(s, dtype=np.float32) for s in ((6, 5), (5, 3), (6, 3)))
    got = compile_function(matmul(6, 5, 3), opt_level=opt_level)(a, b, c)
    np.testing.assert_array_equal(got, compile_function(matmul(6, 5, 3), opt_level=0)(a, b, c))
    np.testing.assert_allclose(got, c + a @ b, rtol=1e-4, atol=1e-6)
