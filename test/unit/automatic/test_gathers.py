"""A weight tiled on two dims, both of which its op cannot use, is all_gathered one dim after the other (as the
partitioner does: over the mesh's axes in order): the search's model counts the whole copy the second all_gather
makes and the partly gathered one before it, so its peak is the compiled program's within 5% (over, never under).
It counted each dim's gather from the shard (the "whole" copy a quarter of its size on 2x4): a 2-D sharded MLP
21-31% under its compiled peak, and a GPT-2 block on 2x4 left without a layout its budget admits
(benchmarks/auto.py: the search's choice modelled at 404,736 bytes compiled to 494,080)."""

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


@pytest.mark.parametrize("weights", ["arg1.0=x;arg1.1=y", "arg1.0=x;arg1.1=y;arg2.0=y;arg2.1=x", "arg1.0=y;arg1.1=x"])
def test_the_model_counts_a_two_dim_gather_as_compiled(weights):
    mesh = slicer.Mesh({"x": 2, "y": 4})
    tactics = slicer.parse_tactics(f"arg0.0=x,y;{weights}")
    sketch = read_sketch(MLP)
    fixed = resolve_fixed(sketch, tuple(tactics))
    layouts = tuple(fixed.get(i, ((),) * len(sketch.shapes[i])) for i in range(sketch.num_args))
    modelled = Evaluator(sketch, mesh).evaluate(layouts).peak_bytes
    compiled = slicer.compile(MLP, mesh=mesh, tactics=tactics).graph.peak_bytes_per_device()[0]
    assert compiled <= modelled <= 1.05 * compiled
