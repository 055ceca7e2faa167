// The semantic verifier as a pass (dialect/verifier.py): what IRDL cannot check. slicer-opt runs it on every
// input; --no-implicit-verify leaves it to the pass, which reports every error at its location.
// RUN: slicer-opt %s -split-input-file --no-implicit-verify -p slicer-verify -verify-diagnostics
// RUN: slicer-opt %S/Inputs/verified-loop.mlir --no-implicit-verify -p slicer-verify | FileCheck %s --check-prefix=VALID
// RUN: not slicer-opt %s -split-input-file --no-implicit-verify -p slicer-verify 2>&1 | FileCheck %s --check-prefix=FAIL

// A valid program passes unchanged.
// VALID: "slicer.mesh"() {axes = ["x", "y"], shape = array<i64: 2, 4>, sym_name = "mesh"}
// VALID: func.func @tile
// VALID: "slicer.loop"()
// VALID: "slicer.slice"(%{{.*}}, %{{.*}}) {dim = 0 : i64} : (tensor<8x4xf32>, !slicer.range<"x", 2 : i64>) -> tensor<4x4xf32>
// VALID: }) {action = #slicer.tile<0 : i64>, mesh = @mesh}

// A failing input exits 1 with each error located, and a command that reproduces it.
// FAIL: slicer-verify.mlir:[[# @LINE + 2]]:1: error: mesh @mesh has 2 axes but 1 sizes
// expected-error@+1 {{mesh @mesh has 2 axes but 1 sizes}}
"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2>} : () -> ()

// -----

// FAIL: slicer-opt: reproduce with: slicer-opt --pass-pipeline='builtin.module(slicer-verify)'
"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 4>} : () -> ()
func.func @slice_shape(%a: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    // expected-error@+1 {{'slicer.slice' of tensor<8x4xf32> along dim 0 over range<x, 2> gives blocks of shape 4x4, but the result type is tensor<3x4xf32>}}
    %b = "slicer.slice"(%a, %r) {dim = 0 : i64} : (tensor<8x4xf32>, !slicer.range<"x", 2>) -> tensor<3x4xf32>
    %c = tensor.pad %b low[0, 0] high[1, 0] {
    ^bb0(%i: index, %j: index):
      %z = arith.constant 0.0 : f32
      tensor.yield %z : f32
    } : tensor<3x4xf32> to tensor<4x4xf32>
    tosa.yield %c : tensor<4x4xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

// Every error is reported, not only the first: the loop's and the slice's unknown axis.
"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 4>} : () -> ()
func.func @two_errors(%a: tensor<8x4xf32>) -> tensor<8x4xf32> {
  // expected-error@+1 {{unknown mesh axis 'z' in !slicer.range<z> (mesh @mesh has axes x, y)}}
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"z", 2>):
    // expected-error@+1 {{unknown mesh axis 'z' in !slicer.range<z> (mesh @mesh has axes x, y)}}
    %b = "slicer.slice"(%a, %r) {dim = 0 : i64} : (tensor<8x4xf32>, !slicer.range<"z", 2>) -> tensor<4x4xf32>
    tosa.yield %b : tensor<4x4xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}
