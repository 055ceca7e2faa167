"""Loop shapes beyond the examples: several results, sums consumed by replicated ops, 2x2x2 nests with slices of
slices, product ranges, slices that need a reduce_scatter or an all_to_all, captured values, annotations.
Each is partitioned, checked for the collectives it should need, and simulated against the loop program."""

import numpy as np
import pytest
from test_partition_examples import collectives, round_trip

from slicer.passes import transform
from slicer.runtime.simulation.oracle import compare

MESH_2x2x2 = '"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y", "z"], shape = array<i64: 2, 2, 2>} : () -> ()\n'
MESH_Y4 = '"slicer.mesh"() {sym_name = "mesh", axes = ["y"], shape = array<i64: 4>} : () -> ()\n'
MESH_2x4 = '"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 4>} : () -> ()\n'

PROGRAMS = {
    # two results from one tile loop, then a replicated add: each result is gathered once
    "several_results": (MESH_2x4 + """
func.func @f(%a: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %0:2 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    %b = "slicer.slice"(%a, %r) {dim = 0 : i64} : (tensor<8x4xf32>, !slicer.range<"x", 2>) -> tensor<4x4xf32>
    %e = math.exp %b : tensor<4x4xf32>
    %n = arith.negf %b : tensor<4x4xf32>
    tosa.yield %e, %n : tensor<4x4xf32>, tensor<4x4xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> (tensor<8x4xf32>, tensor<8x4xf32>)
  %s = arith.addf %0#0, %0#1 : tensor<8x4xf32>
  return %s : tensor<8x4xf32>
}""", {"shard.all_gather": 2}),
    # a sum loop's result feeds replicated ops. The synthesizer uses the idle axis x: slice by x (free),
    # all_reduce over y on half the data, all_gather over x (1.25 L received instead of 1.5 L)
    "sum_then_replicated": (MESH_2x4 + """
func.func @f(%a: tensor<4x16xf32>, %b: tensor<16x4xf32>) -> tensor<4x4xf32> {
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"y", 4>):
    %ab = "slicer.slice"(%a, %r) {dim = 1 : i64} : (tensor<4x16xf32>, !slicer.range<"y", 4>) -> tensor<4x4xf32>
    %bb = "slicer.slice"(%b, %r) {dim = 0 : i64} : (tensor<16x4xf32>, !slicer.range<"y", 4>) -> tensor<4x4xf32>
    %z = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<4x4xf32>
    %f = linalg.fill ins(%z : f32) outs(%e : tensor<4x4xf32>) -> tensor<4x4xf32>
    %m = linalg.matmul ins(%ab, %bb : tensor<4x4xf32>, tensor<4x4xf32>) outs(%f : tensor<4x4xf32>) -> tensor<4x4xf32>
    tosa.yield %m : tensor<4x4xf32>
  }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<4x4xf32>
  %t = math.tanh %0 : tensor<4x4xf32>
  %u = arith.mulf %t, %0 : tensor<4x4xf32>
  return %u : tensor<4x4xf32>
}""", {"shard.all_reduce": 1}),
    # 2x2x2: batch over x, columns over y, contraction over z (a sum); slices of slices give the argument
    # types [[x],[y],[z]] and [[x],[z],[]]
    "nest_2x2x2": (MESH_2x2x2 + """
func.func @f(%a: tensor<4x8x16xf32>, %w: tensor<4x16x8xf32>) -> tensor<4x8x8xf32> {
  %0 = "slicer.loop"() ({
  ^bb0(%rx: !slicer.range<"x", 2>):
    %ax = "slicer.slice"(%a, %rx) {dim = 0 : i64} : (tensor<4x8x16xf32>, !slicer.range<"x", 2>) -> tensor<2x8x16xf32>
    %wx = "slicer.slice"(%w, %rx) {dim = 0 : i64} : (tensor<4x16x8xf32>, !slicer.range<"x", 2>) -> tensor<2x16x8xf32>
    %1 = "slicer.loop"() ({
    ^bb0(%ry: !slicer.range<"y", 2>):
      %axy = "slicer.slice"(%ax, %ry) {dim = 1 : i64} : (tensor<2x8x16xf32>, !slicer.range<"y", 2>) ->
          tensor<2x4x16xf32>
      %2 = "slicer.loop"() ({
      ^bb0(%rz: !slicer.range<"z", 2>):
        %axyz = "slicer.slice"(%axy, %rz) {dim = 2 : i64} : (tensor<2x4x16xf32>, !slicer.range<"z", 2>) ->
            tensor<2x4x8xf32>
        %wxz = "slicer.slice"(%wx, %rz) {dim = 1 : i64} : (tensor<2x16x8xf32>, !slicer.range<"z", 2>) ->
            tensor<2x8x8xf32>
        %z = arith.constant 0.0 : f32
        %e = tensor.empty() : tensor<2x4x8xf32>
        %f = linalg.fill ins(%z : f32) outs(%e : tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
        %m = linalg.batch_matmul ins(%axyz, %wxz : tensor<2x4x8xf32>, tensor<2x8x8xf32>) outs(%f : tensor<2x4x8xf32>) ->
            tensor<2x4x8xf32>
        tosa.yield %m : tensor<2x4x8xf32>
      }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<2x4x8xf32>
      tosa.yield %2 : tensor<2x4x8xf32>
    }) {action = #slicer.tile<1>, mesh = @mesh} : () -> tensor<2x8x8xf32>
    tosa.yield %1 : tensor<2x8x8xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<4x8x8xf32>
  return %0 : tensor<4x8x8xf32>
}""", {"shard.all_reduce": 1}),
    # one loop over the product range (x, y): block index idx(x) * |y| + idx(y)
    "product_range": (MESH_2x4 + """
func.func @f(%a: tensor<16x4xf32>) -> tensor<16x4xf32> {
  %n = arith.negf %a : tensor<16x4xf32>
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<["x", "y"], 8>):
    %b = "slicer.slice"(%n, %r) {dim = 0 : i64} : (tensor<16x4xf32>, !slicer.range<["x", "y"], 8>) -> tensor<2x4xf32>
    %e = math.exp %b : tensor<2x4xf32>
    tosa.yield %e : tensor<2x4xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<16x4xf32>
  return %0 : tensor<16x4xf32>
}""", {}),
    # a partial sum sliced by the axis it is partial over: one reduce_scatter, no all_reduce (on a 2x4 mesh
    # the synthesizer would also use the idle x axis)
    "slice_of_partial": (MESH_Y4 + """
func.func @f(%a: tensor<8x16xf32>, %b: tensor<16x8xf32>) -> tensor<8x8xf32> {
  %p = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"y", 4>):
    %ab = "slicer.slice"(%a, %r) {dim = 1 : i64} : (tensor<8x16xf32>, !slicer.range<"y", 4>) -> tensor<8x4xf32>
    %bb = "slicer.slice"(%b, %r) {dim = 0 : i64} : (tensor<16x8xf32>, !slicer.range<"y", 4>) -> tensor<4x8xf32>
    %z = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<8x8xf32>
    %f = linalg.fill ins(%z : f32) outs(%e : tensor<8x8xf32>) -> tensor<8x8xf32>
    %m = linalg.matmul ins(%ab, %bb : tensor<8x4xf32>, tensor<4x8xf32>) outs(%f : tensor<8x8xf32>) -> tensor<8x8xf32>
    tosa.yield %m : tensor<8x8xf32>
  }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<8x8xf32>
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"y", 4>):
    %pb = "slicer.slice"(%p, %r) {dim = 0 : i64} : (tensor<8x8xf32>, !slicer.range<"y", 4>) -> tensor<2x8xf32>
    %t = math.tanh %pb : tensor<2x8xf32>
    tosa.yield %t : tensor<2x8xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}""", {"shard.reduce_scatter": 1}),
    # an argument requested tiled on dim 1 but sliced on dim 0 by the same axis: one all_to_all
    "slice_needs_all_to_all": (MESH_2x4 + """
func.func @f(%a: tensor<8x8xf32> {slicer.sharding = #slicer.sharding<@mesh, [[], ["x"]]>}) -> tensor<8x8xf32> {
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    %b = "slicer.slice"(%a, %r) {dim = 0 : i64} : (tensor<8x8xf32>, !slicer.range<"x", 2>) -> tensor<4x8xf32>
    %e = math.exp %b : tensor<4x8xf32>
    tosa.yield %e : tensor<4x8xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}""", {"shard.all_to_all": 1}),
    # a loop yields a value captured from outside (the same block for every index) and an annotation
    # replicates a tiled value in the middle of the function
    "captured_and_annotated": (MESH_2x4 + """
func.func @f(%a: tensor<4x4xf32>, %c: tensor<8x4xf32>) -> (tensor<16x4xf32>, tensor<8x4xf32>) {
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"y", 4>):
    tosa.yield %a : tensor<4x4xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<16x4xf32>
  %1 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    %b = "slicer.slice"(%c, %r) {dim = 0 : i64} : (tensor<8x4xf32>, !slicer.range<"x", 2>) -> tensor<4x4xf32>
    %e = math.exp %b : tensor<4x4xf32>
    tosa.yield %e : tensor<4x4xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8x4xf32>
  %2 = "slicer.annotate"(%1) {sharding = #slicer.sharding<@mesh, [[], []]>} : (tensor<8x4xf32>) -> tensor<8x4xf32>
  return %0, %2 : tensor<16x4xf32>, tensor<8x4xf32>
}""", {"shard.all_gather": 1}),
    # a value computed inside the loop sliced by the loop's own range: each device takes a block of its own
    # member, locally
    "slice_own_member": (MESH_2x4 + """
func.func @f(%a: tensor<8x8xf32>) -> tensor<8x4xf32> {
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"y", 4>):
    %b = "slicer.slice"(%a, %r) {dim = 0 : i64} : (tensor<8x8xf32>, !slicer.range<"y", 4>) -> tensor<2x8xf32>
    %e = math.exp %b : tensor<2x8xf32>
    %c = "slicer.slice"(%e, %r) {dim = 1 : i64} : (tensor<2x8xf32>, !slicer.range<"y", 4>) -> tensor<2x2xf32>
    tosa.yield %c : tensor<2x2xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8x2xf32>
  %1 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    tosa.yield %0 : tensor<8x2xf32>
  }) {action = #slicer.tile<1>, mesh = @mesh} : () -> tensor<8x4xf32>
  return %1 : tensor<8x4xf32>
}""", {}),
}


def partition(module, pipeline: str = "slicer-partition", **options) -> str:
    """`pipeline` (default: slicer-partition) on a copy of `module`; the result's text."""
    return transform(module, pipeline, **options)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_loop_program(name):
    text, expected = PROGRAMS[name]
    spmd = partition(text)
    assert collectives(spmd) == expected, spmd
    result = compare(text, spmd, seed=3)
    for e, a in zip(result.expected, result.actual):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5)
    if "#slicer.sum" not in text:
        assert result.exact
    round_trip(spmd)


def test_nest_2x2x2_argument_types():
    spmd = partition(PROGRAMS["nest_2x2x2"][0])
    assert 'tensor<2x4x8xf32> {slicer.dist = "[[x],[y],[z]]"}' in spmd
    assert 'tensor<2x8x8xf32> {slicer.dist = "[[x],[z],[]]"}' in spmd
    assert 'grid_axes = [2]' in spmd  # the all_reduce is over z only


def test_every_function_of_a_module_is_partitioned():
    text = MESH_2x4 + """
func.func @rows(%a: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    %b = "slicer.slice"(%a, %r) {dim = 0 : i64} : (tensor<8x4xf32>, !slicer.range<"x", 2>) -> tensor<4x4xf32>
    %e = math.exp %b : tensor<4x4xf32>
    tosa.yield %e : tensor<4x4xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}
func.func @cols(%a: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"y", 4>):
    %b = "slicer.slice"(%a, %r) {dim = 1 : i64} : (tensor<8x4xf32>, !slicer.range<"y", 4>) -> tensor<8x1xf32>
    %e = math.exp %b : tensor<8x1xf32>
    tosa.yield %e : tensor<8x1xf32>
  }) {action = #slicer.tile<1>, mesh = @mesh} : () -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}"""
    spmd = partition(text)
    assert 'slicer.dist = "[[x],[]]"' in spmd and 'slicer.dist = "[[],[y]]"' in spmd
    for entry in ("rows", "cols"):
        assert compare(text, spmd, entry=entry).exact
