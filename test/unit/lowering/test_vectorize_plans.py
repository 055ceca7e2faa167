"""The tile sizes `slicer-kernel-vectorize` gives an op (`lowering/vectorize.py`'s `plan_tiles`): a transposed read
gets square blocks over the result's innermost loop and the loop the input walks along its rows; a row-wise op or a
broadcast keeps one long vector tile of its innermost loop."""

import pytest
from mlir import ir

from slicer.core.operations import walk_ops
from slicer.dialect import make_context
from slicer.lowering.vectorize import VectorizeOptions, plan_tiles

GENERIC = """
#a = affine_map<(i, j) -> ({a})>
#o = affine_map<(i, j) -> (i, j)>
func.func @f(%x: tensor<{x}xf32>) -> tensor<128x256xf32> {{
  %e = tensor.empty() : tensor<128x256xf32>
  %r = linalg.generic {{indexing_maps = [#a, #o], iterator_types = ["parallel", "parallel"]}}
      ins(%x : tensor<{x}xf32>) outs(%e : tensor<128x256xf32>) {{
  ^bb0(%v: f32, %out: f32):
    %s = arith.addf %v, %v : f32
    linalg.yield %s : f32
  }} -> tensor<128x256xf32>
  return %r : tensor<128x256xf32>
}}
"""


@pytest.mark.parametrize("read, shape, sizes", [
    ("j, i", "256x128", (16, 16)),  # a transpose: 16x16 blocks
    ("i, j", "128x256", (1, 64)),  # row-wise: one 64-wide vector per row
    ("i", "128", (1, 64)),  # a broadcast along the rows
])
def test_tiles_of_an_elementwise_op(read, shape, sizes):
    with make_context():
        module = ir.Module.parse(GENERIC.format(a=read, x=shape))
        op = next(iter(walk_ops(module, "linalg.generic")))
        plan = plan_tiles(op, 0, VectorizeOptions())
        assert [level.sizes for level in plan.levels] == [sizes]
