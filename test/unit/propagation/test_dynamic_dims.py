"""Programs with dynamic dims: tactics and propagation tile their static dims and never a dynamic one (a block
of a dim of unknown size has no type); slicer.compile, which runs blocks of known sizes, refuses them clearly."""

import pytest

import slicer
from slicer.dialect.verifier import verify

MATMUL = """
func.func @f(%x: tensor<?x16xf32>, %w: tensor<16x32xf32>) -> tensor<?x32xf32> {
  %c0 = arith.constant 0 : index
  %z = arith.constant 0.0 : f32
  %n = tensor.dim %x, %c0 : tensor<?x16xf32>
  %e = tensor.empty(%n) : tensor<?x32xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<?x32xf32>) -> tensor<?x32xf32>
  %h = linalg.matmul ins(%x, %w : tensor<?x16xf32>, tensor<16x32xf32>) outs(%f : tensor<?x32xf32>) -> tensor<?x32xf32>
  return %h : tensor<?x32xf32>
}
"""
# A static dim walking the same loop as a dynamic one: tiling it would cut the dynamic one too.
MIXED = """
#id = affine_map<(i) -> (i)>
func.func @g(%a: tensor<8xf32>, %b: tensor<?xf32>) -> tensor<8xf32> {
  %e = tensor.empty() : tensor<8xf32>
  %r = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel"]}
      ins(%a, %b : tensor<8xf32>, tensor<?xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<8xf32>
  return %r : tensor<8xf32>
}
"""


def propagated(text, tactics):
    module = slicer.apply_tactics(text, slicer.parse_tactics(tactics), mesh={"y": 2})
    slicer.propagate(module)
    module.operation.verify()
    verify(module.operation)
    return slicer.explain(module)


def test_static_dims_of_a_dynamic_program_are_tiled():
    assert "linalg.matmul            tile<1> over y" in propagated(MATMUL, "arg1.1=y")


def test_a_dynamic_dim_is_never_cut():
    assert "linalg.generic           replicated (no loop)" in propagated(MIXED, "arg0.0=y")


def test_tactics_on_dynamic_dims_and_compile_are_clear_errors():
    with pytest.raises(slicer.TacticError, match=r"dim 0 of argument #0 of @f \(tensor<\?x16xf32>\) is dynamic"):
        slicer.apply_tactics(MATMUL, slicer.parse_tactics("arg0.0=y"), mesh={"y": 2})
    with pytest.raises(slicer.CompileError, match=r"argument #0 of @f has type tensor<\?x16xf32>: slicer.compile "
                                                  r"partitions and runs programs whose shapes are known"):
        slicer.compile(MATMUL, mesh=slicer.Mesh(y=2), tactics=slicer.parse_tactics("arg1.1=y"))
