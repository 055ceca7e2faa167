"""Unsupported constructs give located errors that name the op and say what to change (never a crash)."""

import subprocess
import sys

import pytest
from mlir import ir

from slicer.passes import transform

MESH = '"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 4>} : () -> ()\n'


def partition(module, pipeline: str = "slicer-partition", **options) -> str:
    """`pipeline` (default: slicer-partition) on a copy of `module`; the result's text."""
    return transform(module, pipeline, **options)


def error_of(text: str, pipeline: str = "slicer-partition") -> str:
    with pytest.raises(ir.MLIRError) as info:
        partition(text, pipeline)
    return str(info.value)


def test_nested_loops_over_one_axis():
    message = error_of(MESH + """
func.func @f(%a: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    %b = "slicer.slice"(%a, %r) {dim = 0 : i64} : (tensor<8x4xf32>, !slicer.range<"x", 2>) -> tensor<4x4xf32>
    %1 = "slicer.loop"() ({
    ^bb0(%s: !slicer.range<"x", 2>):
      %c = "slicer.slice"(%b, %s) {dim = 0 : i64} : (tensor<4x4xf32>, !slicer.range<"x", 2>) -> tensor<2x4xf32>
      tosa.yield %c : tensor<2x4xf32>
    }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<4x4xf32>
    tosa.yield %1 : tensor<4x4xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}""")
    assert "nested in a loop over the same mesh axis 'x'" in message


def test_annotation_over_a_loop_axis_inside_that_loop():
    message = error_of(MESH + """
func.func @f(%a: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    %b = "slicer.slice"(%a, %r) {dim = 0 : i64} : (tensor<8x4xf32>, !slicer.range<"x", 2>) -> tensor<4x4xf32>
    %c = "slicer.annotate"(%b) {sharding = #slicer.sharding<@mesh, [["x"], []]>} : (tensor<4x4xf32>) -> tensor<4x4xf32>
    tosa.yield %c : tensor<4x4xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}""")
    assert "'slicer.annotate' inside a loop over 'x'" in message


def test_calls_are_reported():
    message = error_of(MESH + """
func.func private @g(%a: tensor<8x4xf32>) -> tensor<8x4xf32> {
  return %a : tensor<8x4xf32>
}
func.func @f(%a: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %0 = func.call @g(%a) : (tensor<8x4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}""")
    assert "'func.call'" in message and "inline" in message


def test_two_meshes_need_a_choice():
    text = MESH + '"slicer.mesh"() {sym_name = "other", axes = ["z"], shape = array<i64: 2>} : () -> ()\n' + """
func.func @f(%a: tensor<8x4xf32>) -> tensor<8x4xf32> {
  return %a : tensor<8x4xf32>
}"""
    assert "name one with slicer-partition{mesh=NAME}" in error_of(text)
    assert "shard.grid @other" in partition(text, "slicer-partition{mesh=other}")


@pytest.mark.slow
def test_slicer_opt_reports_the_location(tmp_path):
    source = tmp_path / "bad.mlir"
    source.write_text(MESH + """
func.func @f(%a: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    %b = "slicer.slice"(%a, %r) {dim = 0 : i64} : (tensor<8x4xf32>, !slicer.range<"x", 2>) -> tensor<4x4xf32>
    %c = "slicer.annotate"(%b) {sharding = #slicer.sharding<@mesh, [["x"], []]>} : (tensor<4x4xf32>) -> tensor<4x4xf32>
    tosa.yield %c : tensor<4x4xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}""")
    done = subprocess.run([sys.executable, "-m", "slicer.tools.slicer_opt", str(source), "-p", "slicer-partition"],
                          capture_output=True, text=True)
    assert done.returncode == 1
    assert f"{source}:7:10: error: slicer-partition: 'slicer.annotate' inside a loop" in done.stderr


def test_loops_inside_other_regions_are_reported():
    message = error_of(MESH + """
func.func @f(%a: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c1 = arith.constant 1 : index
  %r = scf.for %i = %c0 to %c2 step %c1 iter_args(%acc = %a) -> (tensor<8x4xf32>) {
    %0 = "slicer.loop"() ({
    ^bb0(%g: !slicer.range<"x", 2>):
      %b = "slicer.slice"(%acc, %g) {dim = 0 : i64} : (tensor<8x4xf32>, !slicer.range<"x", 2>) -> tensor<4x4xf32>
      tosa.yield %b : tensor<4x4xf32>
    }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8x4xf32>
    scf.yield %0 : tensor<8x4xf32>
  }
  return %r : tensor<8x4xf32>
}""")
    assert "inside the region of 'scf.for' cannot be partitioned" in message
