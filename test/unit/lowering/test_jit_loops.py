"""slicer.loop programs lowered with slicer-lower-to-loops and run by the JIT equal numpy."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slicer.lowering import JitError, compile_function

MESH = '"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: %d, %d>} : () -> ()\n'


def nested_matmul(m, k, n, x, y):
    """C = A @ B with rows of A tiled over x and the contraction summed over y."""
    bm, bk = m // x, k // y
    return MESH % (x, y) + f"""
func.func @matmul(%a: tensor<{m}x{k}xf32>, %b: tensor<{k}x{n}xf32>) -> tensor<{m}x{n}xf32> {{
  %0 = "slicer.loop"() ({{
  ^bb0(%rx: !slicer.range<"x", {x}>):
    %a0 = "slicer.slice"(%a, %rx) {{dim = 0 : i64}} : (tensor<{m}x{k}xf32>, !slicer.range<"x", {x}>) ->
        tensor<{bm}x{k}xf32>
    %1 = "slicer.loop"() ({{
    ^bb0(%ry: !slicer.range<"y", {y}>):
      %a1 = "slicer.slice"(%a0, %ry) {{dim = 1 : i64}} : (tensor<{bm}x{k}xf32>, !slicer.range<"y", {y}>) ->
          tensor<{bm}x{bk}xf32>
      %b1 = "slicer.slice"(%b, %ry) {{dim = 0 : i64}} : (tensor<{k}x{n}xf32>, !slicer.range<"y", {y}>) ->
          tensor<{bk}x{n}xf32>
      %e = tensor.empty() : tensor<{bm}x{n}xf32>
      %z = arith.constant 0.0 : f32
      %f = linalg.fill ins(%z : f32) outs(%e : tensor<{bm}x{n}xf32>) -> tensor<{bm}x{n}xf32>
      %p = linalg.matmul ins(%a1, %b1 : tensor<{bm}x{bk}xf32>, tensor<{bk}x{n}xf32>) outs(%f : tensor<{bm}x{n}xf32>) ->
          tensor<{bm}x{n}xf32>
      tosa.yield %p : tensor<{bm}x{n}xf32>
    }}) {{action = #slicer.sum, mesh = @mesh}} : () -> tensor<{bm}x{n}xf32>
    tosa.yield %1 : tensor<{bm}x{n}xf32>
  }}) {{action = #slicer.tile<0>, mesh = @mesh}} : () -> tensor<{m}x{n}xf32>
  return %0 : tensor<{m}x{n}xf32>
}}
"""


def test_nested_tile_and_sum_over_two_axes_equals_numpy():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((8, 12), dtype=np.float32)
    b = rng.standard_normal((12, 5), dtype=np.float32)
    result = compile_function(nested_matmul(8, 12, 5, 2, 4))(a, b)
    np.testing.assert_allclose(result, a @ b, rtol=1e-5, atol=1e-5)


@settings(max_examples=12, deadline=None)
@given(
    x=st.sampled_from([1, 2, 4]),
    y=st.sampled_from([1, 2, 3]),
    bm=st.integers(1, 3),
    bk=st.integers(1, 3),
    n=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_nested_loops_any_shape(x, y, bm, bk, n, seed):
    m, k = bm * x, bk * y
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    np.testing.assert_allclose(compile_function(nested_matmul(m, k, n, x, y))(a, b), a @ b, rtol=1e-4, atol=1e-4)


TILE_AND_PRODUCT = MESH % (2, 4) + """
func.func @f(%a: tensor<6x8xi32>, %v: tensor<16xf64>) -> (tensor<6x8xi32>, tensor<16xf64>, tensor<6x2xi32>) {
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"y", 4>):
    %b = "slicer.slice"(%a, %r) {dim = 1 : i64} : (tensor<6x8xi32>, !slicer.range<"y", 4>) -> tensor<6x2xi32>
    %d = arith.muli %b, %b : tensor<6x2xi32>
    tosa.yield %d : tensor<6x2xi32>
  }) {action = #slicer.tile<1>, mesh = @mesh} : () -> tensor<6x8xi32>
  %1 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<["x", "y"], 8>):
    %b = "slicer.slice"(%v, %r) {dim = 0 : i64} : (tensor<16xf64>, !slicer.range<["x", "y"], 8>) -> tensor<2xf64>
    %n = math.exp %b : tensor<2xf64>
    tosa.yield %n : tensor<2xf64>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<16xf64>
  %2 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"y", 4>):
    %b = "slicer.slice"(%a, %r) {dim = 1 : i64} : (tensor<6x8xi32>, !slicer.range<"y", 4>) -> tensor<6x2xi32>
    tosa.yield %b : tensor<6x2xi32>
  }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<6x2xi32>
  return %0, %1, %2 : tensor<6x8xi32>, tensor<16xf64>, tensor<6x2xi32>
}
"""


def test_tile_sum_and_product_range_with_several_results():
    rng = np.random.default_rng(1)
    a = rng.integers(-50, 50, (6, 8), dtype=np.int32)
    v = rng.standard_normal(16)
    squares, exps, sums = compile_function(TILE_AND_PRODUCT)(a, v)
    np.testing.assert_array_equal(squares, a * a)
    np.testing.assert_allclose(exps, np.exp(v), rtol=1e-12)
    np.testing.assert_array_equal(sums, a.reshape(6, 4, 2).sum(axis=1))


def test_inputs_are_not_modified():
    rng = np.random.default_rng(2)
    a = rng.integers(-5, 5, (6, 8), dtype=np.int32)
    v = rng.standard_normal(16)
    a0, v0 = a.copy(), v.copy()
    compile_function(TILE_AND_PRODUCT)(a, v)
    np.testing.assert_array_equal(a, a0)
    np.testing.assert_array_equal(v, v0)


def test_wrong_argument_shape_is_a_clear_error():
    fn = compile_function(nested_matmul(8, 12, 5, 2, 4))
    with pytest.raises(JitError, match=r"argument #1 of @matmul must be float32\[12, 5\], got float32\[5, 12\]"):
        fn(np.zeros((8, 12), np.float32), np.zeros((5, 12), np.float32))
    with pytest.raises(JitError, match="takes 2 arrays, got 1"):
        fn(np.zeros((8, 12), np.float32))


def test_entry_must_exist():
    with pytest.raises(JitError, match=r"has no function @nope \(functions: @matmul\)"):
        compile_function(nested_matmul(8, 12, 5, 2, 4), entry="nope")
