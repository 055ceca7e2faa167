// RUN: slicer-opt %s -split-input-file --pass-pipeline='builtin.module(slicer-lower-to-loops)' | FileCheck %s
// The output is plain upstream MLIR (mesh declarations aside):
// RUN: slicer-opt %s -split-input-file -p slicer-lower-to-loops | mlir-opt --irdl-file=%irdl -split-input-file | FileCheck %s

"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 4>} : () -> ()

// A tile loop: scf.for over the range, extract_slice in, insert_slice out.
// CHECK-LABEL: func.func @tile
// CHECK-SAME: (%[[A:.*]]: tensor<8x4xf32>)
// CHECK: %[[INIT:.*]] = tensor.empty() : tensor<8x4xf32>
// CHECK: %[[C0:.*]] = arith.constant 0 : index
// CHECK: %[[C2:.*]] = arith.constant 2 : index
// CHECK: %[[FOR:.*]] = scf.for %[[I:.*]] = %[[C0]] to %[[C2]] step %{{.*}} iter_args(%[[ACC:.*]] = %[[INIT]]) -> (tensor<8x4xf32>)
// CHECK: %[[C4:.*]] = arith.constant 4 : index
// CHECK: %[[OFF:.*]] = arith.muli %[[I]], %[[C4]] : index
// CHECK: %[[BLK:.*]] = tensor.extract_slice %[[A]][%[[OFF]], 0] [4, 4] [1, 1] : tensor<8x4xf32> to tensor<4x4xf32>
// CHECK: %[[NEG:.*]] = arith.negf %[[BLK]] : tensor<4x4xf32>
// CHECK: %[[OFF2:.*]] = arith.muli %[[I]], %{{.*}} : index
// CHECK: %[[INS:.*]] = tensor.insert_slice %[[NEG]] into %[[ACC]][%[[OFF2]], 0] [4, 4] [1, 1]
// CHECK: scf.yield %[[INS]] : tensor<8x4xf32>
// CHECK: return %[[FOR]]
// CHECK-NOT: slicer.{{loop|slice|annotate}}
func.func @tile(%a: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    %b = "slicer.slice"(%a, %r) {dim = 0 : i64} : (tensor<8x4xf32>, !slicer.range<"x", 2>) -> tensor<4x4xf32>
    %n = arith.negf %b : tensor<4x4xf32>
    tosa.yield %n : tensor<4x4xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 4>} : () -> ()

// A sum loop accumulates into zeros with linalg.add.
// CHECK-LABEL: func.func @sum
// CHECK: %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK: %[[FILL:.*]] = linalg.fill ins(%[[ZERO]] : f32) outs(%{{.*}} : tensor<2x3xf32>)
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[ACC:.*]] = %[[FILL]])
// CHECK: tensor.extract_slice %{{.*}}[0, %{{.*}}] [2, 3] [1, 1] : tensor<2x12xf32> to tensor<2x3xf32>
// CHECK: %[[ADD:.*]] = linalg.add ins(%[[ACC]], %{{.*}} : tensor<2x3xf32>, tensor<2x3xf32>) outs(%[[ACC]] : tensor<2x3xf32>)
// CHECK: scf.yield %[[ADD]]
func.func @sum(%a: tensor<2x12xf32>) -> tensor<2x3xf32> {
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"y", 4>):
    %b = "slicer.slice"(%a, %r) {dim = 1 : i64} : (tensor<2x12xf32>, !slicer.range<"y", 4>) -> tensor<2x3xf32>
    tosa.yield %b : tensor<2x3xf32>
  }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 4>} : () -> ()

// Nested loops over two axes, integer sum, a product range, and an annotation (dropped).
// CHECK-LABEL: func.func @nested
// CHECK: scf.for
// CHECK: arith.constant 0 : i32
// CHECK: linalg.fill
// CHECK: scf.for
// CHECK: linalg.add
// CHECK: tensor.insert_slice
// CHECK: scf.for
// CHECK: tensor.extract_slice %{{.*}}[%{{.*}}] [1] [1] : tensor<8xi32> to tensor<1xi32>
// CHECK-NOT: slicer.annotate
func.func @nested(%a: tensor<4x8xi32>, %v: tensor<8xi32>) -> (tensor<4x8xi32>, tensor<8xi32>) {
  %0 = "slicer.loop"() ({
  ^bb0(%rx: !slicer.range<"x", 2>):
    %ax = "slicer.slice"(%a, %rx) {dim = 0 : i64} : (tensor<4x8xi32>, !slicer.range<"x", 2>) -> tensor<2x8xi32>
    %s = "slicer.loop"() ({
    ^bb0(%ry: !slicer.range<"y", 4>):
      tosa.yield %ax : tensor<2x8xi32>
    }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<2x8xi32>
    tosa.yield %s : tensor<2x8xi32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<4x8xi32>
  %1 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<["x", "y"], 8>):
    %b = "slicer.slice"(%v, %r) {dim = 0 : i64} : (tensor<8xi32>, !slicer.range<["x", "y"], 8>) -> tensor<1xi32>
    tosa.yield %b : tensor<1xi32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8xi32>
  %2 = "slicer.annotate"(%1) {sharding = #slicer.sharding<@mesh, [["x", "y"]]>} : (tensor<8xi32>) -> tensor<8xi32>
  return %0, %2 : tensor<4x8xi32>, tensor<8xi32>
}
