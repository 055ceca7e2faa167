"""A weight tiled on two dims its op cannot use is all_gathered one dim after the other, into the whole weight:
the search's model counts that whole copy, as for the weight tiled on one dim over both axes. It counted each
dim's gather from the shard: a "whole" copy of 6/8 of the weight on 2x4 (2/8 + 4/8), which put a GPT-2 block's 2-D
sharded MLP 22% under its compiled peak and left the block on 2x4 without a tiling its budget admits
(benchmarks/auto.py: the choice modelled at 404,736 bytes compiled to 494,080). The copy gathered over the first
axis lives only until the second all_gather, between kernels, which the model's trace does not count (nor the
moment of an all_gather, when its input and output both live: the compiled peaks here are 5-15% higher)."""

import pytest

import slicer
from slicer.automatic import Evaluator, read_sketch
from slicer.automatic.candidates import resolve_fixed

MLP = """
#a = affine_map<(i, j, k) -> (i, k)>
#b = affine_map<(i, j, k) -> (k, j)>
#c = affine_map<(i, j, k) -> (i, j)>
#id = affine_map<(i, j) -> (i, j)>
func.func @mlp(%x: tensor<64x128xf32>, %w1: tensor<128x512xf32>, %w2: tensor<512x128xf32>) -> tensor<64x128xf32> {
  %zero = arith.constant 0.0 : f32
  %eh = tensor.empty() : tensor<64x512xf32>
  %fh = linalg.fill ins(%zero : f32) outs(%eh : tensor<64x512xf32>) -> tensor<64x512xf32>
  %h = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w1 : tensor<64x128xf32>, tensor<128x512xf32>) outs(%fh : tensor<64x512xf32>) {
  ^bb0(%u: f32, %v: f32, %acc: f32):
    %p = arith.mulf %u, %v : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<64x512xf32>
  %t = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%h : tensor<64x512xf32>) outs(%eh : tensor<64x512xf32>) {
  ^bb0(%u: f32, %o: f32):
    %r = math.tanh %u : f32
    linalg.yield %r : f32
  } -> tensor<64x512xf32>
  %ed = tensor.empty() : tensor<64x128xf32>
  %fd = linalg.fill ins(%zero : f32) outs(%ed : tensor<64x128xf32>) -> tensor<64x128xf32>
  %y = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%t, %w2 : tensor<64x512xf32>, tensor<512x128xf32>) outs(%fd : tensor<64x128xf32>) {
  ^bb0(%u: f32, %v: f32, %acc: f32):
    %p = arith.mulf %u, %v : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<64x128xf32>
  return %y : tensor<64x128xf32>
}
"""


def _peak(mesh, tactics: str) -> int:
    sketch = read_sketch(MLP)
    fixed = resolve_fixed(sketch, tuple(slicer.parse_tactics(tactics)))
    tilings = tuple(fixed.get(i, ((),) * len(sketch.shapes[i])) for i in range(sketch.num_args))
    return Evaluator(sketch, mesh).evaluate(tilings).peak_bytes


@pytest.mark.parametrize("two_dims, one_dim", [
    ("arg1.0=x;arg1.1=y", "arg1.1=x,y"),
    ("arg1.0=y;arg1.1=x", "arg1.0=x,y"),
    ("arg1.0=x;arg1.1=y;arg2.0=y;arg2.1=x", "arg1.1=x,y;arg2.0=x,y"),
])
def test_a_weight_gathered_on_two_dims_is_counted_whole(two_dims, one_dim):
    mesh = slicer.Mesh({"x": 2, "y": 4})
    assert _peak(mesh, f"arg0.0=x,y;{two_dims}") == _peak(mesh, f"arg0.0=x,y;{one_dim}")
    compiled = slicer.compile(MLP, mesh=mesh, tactics=slicer.parse_tactics(f"arg0.0=x,y;{two_dims}"))
    assert compiled.graph.peak_bytes_per_device()[0] >= _peak(mesh, f"arg0.0=x,y;{two_dims}")
