// Strategies on the examples (tactics from the command line, then propagation):
// RUN: slicer-opt %S/../../examples/mlp.mlir -p 'slicer-apply-tactics{mesh=x=2,y=4 tactics=arg1.1=y;arg3.0=y},slicer-propagate' | FileCheck %s --check-prefix=MEGATRON
// RUN: slicer-opt %S/../../examples/mlp.mlir -p 'slicer-apply-tactics{mesh=x=2,y=4 tactics=arg0.0=x},slicer-propagate' | FileCheck %s --check-prefix=DATA
// RUN: slicer-opt %S/../../examples/mlp.mlir -p 'slicer-apply-tactics{mesh=x=2,y=4 tactics=arg0.0=x;arg1.1=y;arg3.0=y},slicer-propagate' | FileCheck %s --check-prefix=TWOD
// RUN: slicer-opt %S/../../examples/mha.mlir -p 'slicer-apply-tactics{mesh=x=2,y=4 tactics=arg1.1=y;arg2.1=y;arg3.1=y;arg4.0=y},slicer-propagate' | FileCheck %s --check-prefix=HEADS
// RUN: slicer-opt %S/../../examples/mlp.mlir -p 'slicer-apply-tactics{mesh=x=2,y=4 tactics=arg0.0=x;arg1.1=x},slicer-propagate' | FileCheck %s --check-prefix=CONFLICT
// RUN: slicer-opt %S/../../examples/mha.mlir -p 'slicer-apply-tactics{mesh=x=2,y=4 tactics=arg0.0=x},slicer-propagate' | FileCheck %s --check-prefix=SEQ
// RUN: slicer-opt %S/../../examples/layernorm.mlir -p 'slicer-apply-tactics{mesh=x=2,y=4 tactics=arg0.0=x},slicer-propagate' | FileCheck %s --check-prefix=LN-ROWS
// RUN: slicer-opt %S/../../examples/layernorm.mlir -p 'slicer-apply-tactics{mesh=x=2,y=4 tactics=arg0.1=y},slicer-propagate' | FileCheck %s --check-prefix=LN-FEATURES
// RUN: slicer-opt %S/../../examples/batch_matmul.mlir -p 'slicer-apply-tactics{mesh=x=2,y=4 tactics=arg0.0=x;arg1.2=y},slicer-propagate' | FileCheck %s --check-prefix=BMM
// RUN: slicer-opt %S/../../examples/reduction.mlir -p 'slicer-apply-tactics{mesh=x=2,y=4 tactics=arg0.1=y},slicer-propagate' | FileCheck %s --check-prefix=RED
// RUN: slicer-opt %S/../../examples/reshape.mlir -p 'slicer-apply-tactics{mesh=x=2,y=4 tactics=arg0.0=x},slicer-propagate' | FileCheck %s --check-prefix=RESHAPE
// RUN: slicer-opt %S/../../examples/transpose.mlir -p 'slicer-apply-tactics{mesh=x=2,y=4 tactics=arg0.0=x},slicer-propagate' | FileCheck %s --check-prefix=TRANSPOSE
// RUN: slicer-opt %S/../../examples/mlp.mlir -p 'slicer-apply-tactics{mesh=x=2,y=4 tactics=arg0.0=x;arg1.1=x},slicer-propagate' | mlir-opt --irdl-file=%irdl > /dev/null
// A dim rotated by whole blocks (ring attention's keys moving one step): its reader computes on the rotation's blocks:
// RUN: slicer-opt %S/Inputs/rotation.mlir -p 'slicer-apply-tactics{mesh=x=2 tactics=arg0.0=x},slicer-propagate' | FileCheck %s --check-prefix=ROTATION
// One case per law / rule kind (hand-written loop form):
// RUN: slicer-opt %s -split-input-file -p slicer-propagate | FileCheck %s
// Errors: strict conflicts and an op without a rule.
// RUN: slicer-opt %S/Inputs/propagate-invalid.mlir -split-input-file -verify-diagnostics -p 'slicer-propagate{strict-conflicts=1}'

// The rotation stays whole (its slices cross the blocks); the exp reads it by blocks, in a tile loop over x.
// ROTATION-LABEL: func.func @rotation
// ROTATION: %[[ROT:.*]] = tensor.concat dim(0)
// ROTATION: "slicer.loop"() ({
// ROTATION: "slicer.slice"(%[[ROT]], %{{.*}}) {dim = 0 : i64}
// ROTATION: math.exp
// ROTATION: }) {action = #slicer.tile<0 : i64>
// ROTATION: return

// Megatron MLP: one sum loop over y holds both matmuls, the bias add and the relu.
// MEGATRON-LABEL: func.func @mlp
// MEGATRON-NOT: #slicer.tile
// MEGATRON: "slicer.loop"() ({
// MEGATRON: linalg.matmul
// MEGATRON: linalg.generic
// MEGATRON: arith.addf
// MEGATRON: linalg.generic
// MEGATRON: arith.maximumf
// MEGATRON: linalg.matmul
// MEGATRON: }) {action = #slicer.sum, mesh = @mesh, slicer.priority = 0 : i64
// MEGATRON-NOT: "slicer.loop"
// MEGATRON: return

// Data parallel: one tile loop over x on the batch dim, nothing else.
// DATA-LABEL: func.func @mlp
// DATA-COUNT-1: "slicer.loop"
// DATA: "slicer.slice"(%arg0, %{{.*}}) {dim = 0 : i64} : (tensor<8x16xf32>, !slicer.range<"x", 2 : i64>)
// DATA: }) {action = #slicer.tile<0 : i64>, mesh = @mesh
// DATA-NOT: "slicer.loop"

// 2-D: a tile loop over x (batch) around one sum loop over y (Megatron).
// TWOD-LABEL: func.func @mlp
// TWOD: "slicer.loop"() ({
// TWOD: ^bb0(%{{.*}}: !slicer.range<"x", 2 : i64>):
// TWOD: "slicer.loop"() ({
// TWOD: ^bb0(%{{.*}}: !slicer.range<"y", 4 : i64>):
// TWOD: }) {action = #slicer.sum
// TWOD: }) {action = #slicer.tile<0 : i64>
// TWOD-NOT: "slicer.loop"

// Attention with heads over y: a single sum loop (at the output projection).
// HEADS-LABEL: func.func @mha
// HEADS-COUNT-1: "slicer.loop"
// HEADS: math.exp
// HEADS: }) {action = #slicer.sum
// HEADS-NOT: "slicer.loop"

// Rows of x over x and columns of w1 over x: the earlier tactic (rows) wins; w1 is redistributed.
// CONFLICT: linalg.matmul {slicer.conflict = "conflicting tactics at 'linalg.matmul': Tile(arg=1, dim=1, axes='x') tiles this value's dim 1 over x, but Tile(arg=0, dim=0, axes='x') needs the whole value (operand #1)


// Sequence parallel attention: queries tiled over x; K and V are computed in one fused
// loop over x and needed whole by every query block (two recorded redistributions).
// SEQ-LABEL: func.func @mha
// SEQ: }) {action = #slicer.tile<1 : i64>, mesh = @mesh, slicer.priority = 0 : i64, slicer.rule = "fusion of sibling loops over x"{{.*}} -> (tensor<4x8x4xf32>, tensor<4x8x4xf32>)
// SEQ: "slicer.loop"
// SEQ-COUNT-2: slicer.conflict = "conflicting tactics at 'linalg.generic'
// SEQ: }) {action = #slicer.tile<0 : i64>, mesh = @mesh
// SEQ-NOT: "slicer.loop"

// Layernorm over rows: one tile loop (the reductions are over the untiled features).
// LN-ROWS-LABEL: func.func @layernorm
// LN-ROWS-COUNT-1: "slicer.loop"
// LN-ROWS: }) {action = #slicer.tile<0 : i64>
// LN-ROWS-NOT: "slicer.loop"

// Layernorm over features: the mean and the variance are sums over y; the normalised
// output is tiled over y.
// LN-FEATURES-LABEL: func.func @layernorm
// LN-FEATURES: }) {action = #slicer.sum, {{.*}} : () -> tensor<8xf32>
// LN-FEATURES: }) {action = #slicer.sum, {{.*}} : () -> tensor<8xf32>
// LN-FEATURES: }) {action = #slicer.tile<1 : i64>, {{.*}} : () -> tensor<8x16xf32>

// Batch matmul: batch over x around output columns over y.
// BMM-LABEL: func.func @batch_matmul
// BMM: linalg.batch_matmul
// BMM: }) {action = #slicer.tile<2 : i64>, {{.*}} : () -> tensor<2x8x8xf32>
// BMM: }) {action = #slicer.tile<0 : i64>, {{.*}} : () -> tensor<4x8x8xf32>

// A sum over the tiled dim: one sum loop.
// RED-LABEL: func.func @row_sum
// RED-COUNT-1: "slicer.loop"
// RED: }) {action = #slicer.sum, {{.*}} : () -> tensor<8xf32>

// Reshapes between ops: rows over x flow through expand/collapse_shape (major dims).
// RESHAPE-LABEL: func.func @group_sums
// RESHAPE-COUNT-1: "slicer.loop"
// RESHAPE: tensor.expand_shape
// RESHAPE: tensor.collapse_shape
// RESHAPE: }) {action = #slicer.tile<0 : i64>, {{.*}} : () -> tensor<32xf32>

// Transpose then matmul: rows of %a become the contraction dim after the transpose: a sum.
// TRANSPOSE-LABEL: func.func @transpose_matmul
// TRANSPOSE-COUNT-1: "slicer.loop"
// TRANSPOSE: linalg.transpose
// TRANSPOSE: }) {action = #slicer.sum, {{.*}} : () -> tensor<16x4xf32>

"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 4>} : () -> ()
// Deforestation + forward (elementwise): the consumer's loop holds the producer's body;
// the producer loop is dead and removed.
// CHECK-LABEL: func.func @deforest
// CHECK-COUNT-1: "slicer.loop"
// CHECK: %[[B:.*]] = "slicer.slice"(%arg0, %{{.*}}) {dim = 0 : i64}
// CHECK: %[[N:.*]] = arith.negf %[[B]] : tensor<4x4xf32>
// CHECK: math.exp %[[N]] : tensor<4x4xf32>
// CHECK-NOT: "slicer.loop"
func.func @deforest(%a: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    %b = "slicer.slice"(%a, %r) {dim = 0 : i64} : (tensor<8x4xf32>, !slicer.range<"x", 2>) -> tensor<4x4xf32>
    %n = arith.negf %b : tensor<4x4xf32>
    tosa.yield %n : tensor<4x4xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8x4xf32>
  %1 = math.exp %0 : tensor<8x4xf32>
  return %1 : tensor<8x4xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 4>} : () -> ()
// Forward through a reduction dim with a non-zero init: a sum loop starting from zeros,
// and the init added once after it. The zero fill is loop-invariant and hoisted.
// CHECK-LABEL: func.func @reduction_with_init
// CHECK: %[[Z:.*]] = linalg.fill
// CHECK: %[[S:.*]] = "slicer.loop"() ({
// CHECK: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<4x2xf32>, tensor<2x3xf32>) outs(%[[Z]] : tensor<4x3xf32>)
// CHECK: }) {action = #slicer.sum, mesh = @mesh, slicer.rule = "forward: linalg.matmul: d2 is a reduction with an additive combiner -> sum (from operand #1 dim 0 tiled over y)"}
// CHECK: %[[ADD:.*]] = linalg.add ins(%[[S]], %arg2 : tensor<4x3xf32>, tensor<4x3xf32>)
// CHECK: return %[[ADD]]
func.func @reduction_with_init(%a: tensor<4x8xf32>, %b: tensor<8x3xf32>, %c: tensor<4x3xf32>) -> tensor<4x3xf32> {
  %bt = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"y", 4>):
    %s = "slicer.slice"(%b, %r) {dim = 0 : i64} : (tensor<8x3xf32>, !slicer.range<"y", 4>) -> tensor<2x3xf32>
    tosa.yield %s : tensor<2x3xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8x3xf32>
  %m = linalg.matmul ins(%a, %bt : tensor<4x8xf32>, tensor<8x3xf32>) outs(%c : tensor<4x3xf32>) -> tensor<4x3xf32>
  return %m : tensor<4x3xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 4>} : () -> ()
// A max reduction over the tiled dim is not a sum: the rule is blocked, the op stays
// outside the loop and takes the whole (rebuilt) value.
// CHECK-LABEL: func.func @blocked_max
// CHECK: %[[T:.*]] = "slicer.loop"
// CHECK: }) {action = #slicer.tile<1 : i64>, mesh = @mesh} : () -> tensor<4x8xf32>
// CHECK: linalg.generic {{.*}} ins(%[[T]] : tensor<4x8xf32>)
func.func @blocked_max(%a: tensor<4x8xf32>) -> tensor<4xf32> {
  %at = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"y", 4>):
    %s = "slicer.slice"(%a, %r) {dim = 1 : i64} : (tensor<4x8xf32>, !slicer.range<"y", 4>) -> tensor<4x2xf32>
    tosa.yield %s : tensor<4x2xf32>
  }) {action = #slicer.tile<1>, mesh = @mesh} : () -> tensor<4x8xf32>
  %low = arith.constant -1.0e+30 : f32
  %e = tensor.empty() : tensor<4xf32>
  %f = linalg.fill ins(%low : f32) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  %m = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>], iterator_types = ["parallel", "reduction"]}
      ins(%at : tensor<4x8xf32>) outs(%f : tensor<4xf32>) {
  ^bb0(%v: f32, %acc: f32):
    %r = arith.maximumf %acc, %v : f32
    linalg.yield %r : f32
  } -> tensor<4xf32>
  return %m : tensor<4xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 4>} : () -> ()
// Backward: a block of a result requested by a tile loop on the result is computed from
// blocks of the operands (through the transpose, whose rule comes from its indexing maps).
// CHECK-LABEL: func.func @backward
// CHECK: "slicer.loop"() ({
// CHECK: "slicer.slice"(%arg0, %{{.*}}) {dim = 1 : i64} : (tensor<4x8xf32>, !slicer.range<"x", 2 : i64>) -> tensor<4x4xf32>
// CHECK: linalg.transpose ins(%{{.*}} : tensor<4x4xf32>) outs(%{{.*}} : tensor<4x4xf32>)
// CHECK: }) {action = #slicer.tile<0 : i64>, mesh = @mesh} : () -> tensor<8x4xf32>
func.func @backward(%a: tensor<4x8xf32>) -> tensor<8x4xf32> {
  %e = tensor.empty() : tensor<8x4xf32>
  %t = linalg.transpose ins(%a : tensor<4x8xf32>) outs(%e : tensor<8x4xf32>) permutation = [1, 0]
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    %b = "slicer.slice"(%t, %r) {dim = 0 : i64} : (tensor<8x4xf32>, !slicer.range<"x", 2>) -> tensor<4x4xf32>
    tosa.yield %b : tensor<4x4xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 4>} : () -> ()
// A slice over y of a loop over x on another dim commutes into that loop (2-D tiling); the slices then
// take the outer loop's block first, hoisted out of the inner loop (order_slices, hoist_invariant).
// CHECK-LABEL: func.func @commute
// CHECK: ^bb0(%[[RY:.*]]: !slicer.range<"y", 4 : i64>):
// CHECK-NEXT: %[[BY:.*]] = "slicer.slice"(%arg0, %[[RY]]) {dim = 1 : i64} : (tensor<8x8xf32>, !slicer.range<"y", 4 : i64>) -> tensor<8x2xf32>
// CHECK: ^bb0(%[[RX:.*]]: !slicer.range<"x", 2 : i64>):
// CHECK-NEXT: "slicer.slice"(%[[BY]], %[[RX]]) {dim = 0 : i64} : (tensor<8x2xf32>, !slicer.range<"x", 2 : i64>) -> tensor<4x2xf32>
// CHECK: }) {action = #slicer.tile<0 : i64>, mesh = @mesh, slicer.rule = "slice over y commuted into the loop over x"} : () -> tensor<8x2xf32>
// CHECK: }) {action = #slicer.tile<1 : i64>, mesh = @mesh} : () -> tensor<8x8xf32>
func.func @commute(%a: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    %b = "slicer.slice"(%a, %r) {dim = 0 : i64} : (tensor<8x8xf32>, !slicer.range<"x", 2>) -> tensor<4x8xf32>
    tosa.yield %b : tensor<4x8xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8x8xf32>
  %1 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"y", 4>):
    %b = "slicer.slice"(%0, %r) {dim = 1 : i64} : (tensor<8x8xf32>, !slicer.range<"y", 4>) -> tensor<8x2xf32>
    tosa.yield %b : tensor<8x2xf32>
  }) {action = #slicer.tile<1>, mesh = @mesh} : () -> tensor<8x8xf32>
  return %1 : tensor<8x8xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 4>} : () -> ()
// Slice composition: a block over x sliced again over y along the same dim is one slice
// over the product range [x, y], which deforests against the loop over that product range.
// CHECK-LABEL: func.func @compose
// CHECK: ^bb0(%[[RX:.*]]: !slicer.range<"x", 2 : i64>):
// CHECK: ^bb0(%[[RY:.*]]: !slicer.range<"y", 4 : i64>):
// CHECK: %[[P:.*]] = "slicer.range_product"(%[[RX]], %[[RY]]) : (!slicer.range<"x", 2 : i64>, !slicer.range<"y", 4 : i64>) -> !slicer.range<["x", "y"], 8 : i64>
// CHECK: %[[S:.*]] = "slicer.slice"(%arg0, %[[P]]) {dim = 0 : i64} : (tensor<16x4xf32>, !slicer.range<["x", "y"], 8 : i64>) -> tensor<2x4xf32>
// CHECK: %[[N:.*]] = arith.negf %[[S]]
// CHECK: math.exp %[[N]]
// CHECK-COUNT-2: }) {action = #slicer.tile<0 : i64>
// CHECK-NOT: "slicer.loop"
func.func @compose(%a: tensor<16x4xf32>) -> tensor<16x4xf32> {
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<["x", "y"], 8>):
    %b = "slicer.slice"(%a, %r) {dim = 0 : i64} : (tensor<16x4xf32>, !slicer.range<["x", "y"], 8>) -> tensor<2x4xf32>
    %n = arith.negf %b : tensor<2x4xf32>
    tosa.yield %n : tensor<2x4xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<16x4xf32>
  %1 = "slicer.loop"() ({
  ^bb0(%rx: !slicer.range<"x", 2>):
    %bx = "slicer.slice"(%0, %rx) {dim = 0 : i64} : (tensor<16x4xf32>, !slicer.range<"x", 2>) -> tensor<8x4xf32>
    %2 = "slicer.loop"() ({
    ^bb0(%ry: !slicer.range<"y", 4>):
      %bxy = "slicer.slice"(%bx, %ry) {dim = 0 : i64} : (tensor<8x4xf32>, !slicer.range<"y", 4>) -> tensor<2x4xf32>
      %e = math.exp %bxy : tensor<2x4xf32>
      tosa.yield %e : tensor<2x4xf32>
    }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8x4xf32>
    tosa.yield %2 : tensor<8x4xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<16x4xf32>
  return %1 : tensor<16x4xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 4>} : () -> ()
// Fusion: independent sibling loops over one range with one action, reading a common value, become one loop
// (and their slices of it one slice).
// CHECK-LABEL: func.func @fusion
// CHECK-COUNT-1: "slicer.loop"
// CHECK-COUNT-1: "slicer.slice"
// CHECK: math.exp
// CHECK: arith.negf
// CHECK: }) {action = #slicer.tile<0 : i64>, mesh = @mesh, slicer.rule = "fusion of sibling loops over x"} : () -> (tensor<8x4xf32>, tensor<8x4xf32>)
func.func @fusion(%a: tensor<8x4xf32>) -> (tensor<8x4xf32>, tensor<8x4xf32>) {
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    %s = "slicer.slice"(%a, %r) {dim = 0 : i64} : (tensor<8x4xf32>, !slicer.range<"x", 2>) -> tensor<4x4xf32>
    %e = math.exp %s : tensor<4x4xf32>
    tosa.yield %e : tensor<4x4xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8x4xf32>
  %1 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    %s = "slicer.slice"(%a, %r) {dim = 0 : i64} : (tensor<8x4xf32>, !slicer.range<"x", 2>) -> tensor<4x4xf32>
    %n = arith.negf %s : tensor<4x4xf32>
    tosa.yield %n : tensor<4x4xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8x4xf32>
  return %0, %1 : tensor<8x4xf32>, tensor<8x4xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 4>} : () -> ()
// No fusion of loops that read nothing in common: nothing to share (the partitioner inlines every body), and
// asking every pair of sibling loops would be quadratic in their number.
// CHECK-LABEL: func.func @no_fusion_without_a_common_value
// CHECK-COUNT-2: "slicer.loop"
// CHECK-NOT: fusion of sibling loops
func.func @no_fusion_without_a_common_value(%a: tensor<8x4xf32>, %b: tensor<8x4xf32>) -> (tensor<8x4xf32>, tensor<8x4xf32>) {
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    %s = "slicer.slice"(%a, %r) {dim = 0 : i64} : (tensor<8x4xf32>, !slicer.range<"x", 2>) -> tensor<4x4xf32>
    %e = math.exp %s : tensor<4x4xf32>
    tosa.yield %e : tensor<4x4xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8x4xf32>
  %1 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    %s = "slicer.slice"(%b, %r) {dim = 0 : i64} : (tensor<8x4xf32>, !slicer.range<"x", 2>) -> tensor<4x4xf32>
    %n = arith.negf %s : tensor<4x4xf32>
    tosa.yield %n : tensor<4x4xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8x4xf32>
  return %0, %1 : tensor<8x4xf32>, tensor<8x4xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 4>} : () -> ()
// No fusion of sibling loops yielding different types: a loop's results share one type.
// CHECK-LABEL: func.func @no_fusion_of_different_types
// CHECK-COUNT-2: "slicer.loop"
// CHECK-NOT: "slicer.loop"
// CHECK: return
func.func @no_fusion_of_different_types(%a: tensor<8x4xf32>) -> (tensor<8x4xf32>, tensor<8x2xf32>) {
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    %s = "slicer.slice"(%a, %r) {dim = 0 : i64} : (tensor<8x4xf32>, !slicer.range<"x", 2>) -> tensor<4x4xf32>
    %e = math.exp %s : tensor<4x4xf32>
    tosa.yield %e : tensor<4x4xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8x4xf32>
  %1 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    %s = "slicer.slice"(%a, %r) {dim = 0 : i64} : (tensor<8x4xf32>, !slicer.range<"x", 2>) -> tensor<4x4xf32>
    %h = tensor.extract_slice %s[0, 0] [4, 2] [1, 1] : tensor<4x4xf32> to tensor<4x2xf32>
    tosa.yield %h : tensor<4x2xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8x2xf32>
  return %0, %1 : tensor<8x4xf32>, tensor<8x2xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 4>} : () -> ()
// Hoisting: code in a loop that uses nothing of the loop moves out before it.
// CHECK-LABEL: func.func @hoist
// CHECK: arith.constant dense<2.000000e+00> : tensor<4x4xf32>
// CHECK-NEXT: "slicer.loop"
func.func @hoist(%a: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    %two = arith.constant dense<2.0> : tensor<4x4xf32>
    %b = "slicer.slice"(%a, %r) {dim = 0 : i64} : (tensor<8x4xf32>, !slicer.range<"x", 2>) -> tensor<4x4xf32>
    %m = arith.mulf %b, %two : tensor<4x4xf32>
    tosa.yield %m : tensor<4x4xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 2>} : () -> ()
// A 2-D loop nest with two consumers keeps its loops; a consumer in another x loop reads the device's own
// block through a slice, and sees the inner y tiling through it: it is pulled into a y loop (its operand
// sliced again by y), not computed whole over y (which would all-gather the block over y).
// CHECK-LABEL: func.func @own_block_inner_tiling
// CHECK: %[[L:.*]] = "slicer.loop"
// CHECK: "slicer.loop"() ({
// CHECK: ^bb0(%[[RX:.*]]: !slicer.range<"x"
// CHECK: %[[B:.*]] = "slicer.slice"(%[[L]], %[[RX]]) {dim = 0 : i64}
// CHECK: "slicer.loop"() ({
// CHECK: ^bb0(%[[RY:.*]]: !slicer.range<"y"
// CHECK: %[[BY:.*]] = "slicer.slice"(%[[B]], %[[RY]]) {dim = 1 : i64}
// CHECK: arith.negf %[[BY]] : tensor<2x4xf32>
// CHECK: }) {action = #slicer.tile<1 : i64>
func.func @own_block_inner_tiling(%a: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %l = "slicer.loop"() ({
  ^bb0(%rx: !slicer.range<"x", 2>):
    %m = "slicer.loop"() ({
    ^bb0(%ry: !slicer.range<"y", 2>):
      %ab = "slicer.slice"(%a, %rx) {dim = 0 : i64} : (tensor<4x8xf32>, !slicer.range<"x", 2>) -> tensor<2x8xf32>
      %abb = "slicer.slice"(%ab, %ry) {dim = 1 : i64} : (tensor<2x8xf32>, !slicer.range<"y", 2>) -> tensor<2x4xf32>
      %x = math.exp %abb : tensor<2x4xf32>
      tosa.yield %x : tensor<2x4xf32>
    }) {action = #slicer.tile<1>, mesh = @mesh} : () -> tensor<2x8xf32>
    tosa.yield %m : tensor<2x8xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<4x8xf32>
  %c = "slicer.loop"() ({
  ^bb0(%rx: !slicer.range<"x", 2>):
    %lb = "slicer.slice"(%l, %rx) {dim = 0 : i64} : (tensor<4x8xf32>, !slicer.range<"x", 2>) -> tensor<2x8xf32>
    %n = arith.negf %lb : tensor<2x8xf32>
    tosa.yield %n : tensor<2x8xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<4x8xf32>
  return %c, %l : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 2>} : () -> ()
// A gather by index (an embedding: the body reads the captured table at a token id) with the table tiled
// over its vocabulary dim: a sum loop of masked lookups, each device reading its rows at the token id minus
// its block's start (a slice of the constant starts [0, 8]), and 0 for the tokens outside its rows.
// CHECK-LABEL: func.func @embedding_over_the_vocabulary
// CHECK: %[[STARTS:.*]] = arith.constant dense<[0, 8]> : tensor<2xi64>
// CHECK: "slicer.loop"() ({
// CHECK: ^bb0(%[[R:.*]]: !slicer.range<"x"
// CHECK-DAG: %[[ROWS:.*]] = "slicer.slice"(%arg1, %[[R]]) {dim = 0 : i64} {{.*}} -> tensor<8x4xf32>
// CHECK-DAG: %[[START:.*]] = "slicer.slice"(%[[STARTS]], %[[R]]) {dim = 0 : i64} {{.*}} -> tensor<1xi64>
// CHECK: linalg.generic
// CHECK: tensor.extract %[[START]]
// CHECK: %[[LOCAL:.*]] = arith.subi
// CHECK: %[[IN:.*]] = arith.andi
// CHECK: %[[SAFE:.*]] = arith.select %[[IN]], %[[LOCAL]]
// CHECK: %[[ROW:.*]] = tensor.extract %[[ROWS]][%[[SAFE]], %{{.*}}] : tensor<8x4xf32>
// CHECK: %[[MASKED:.*]] = arith.select %[[IN]], %[[ROW]]
// CHECK: linalg.yield %[[MASKED]]
// CHECK: }) {action = #slicer.sum
func.func @embedding_over_the_vocabulary(%idx: tensor<3xi64>, %table: tensor<16x4xf32>) -> tensor<3x4xf32> {
  %t = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    %b = "slicer.slice"(%table, %r) {dim = 0 : i64} : (tensor<16x4xf32>, !slicer.range<"x", 2>) -> tensor<8x4xf32>
    tosa.yield %b : tensor<8x4xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<16x4xf32>
  %e = tensor.empty() : tensor<3x4xf32>
  %o = linalg.generic {indexing_maps = [affine_map<(n, d) -> (n)>, affine_map<(n, d) -> (n, d)>],
                       iterator_types = ["parallel", "parallel"]} ins(%idx : tensor<3xi64>) outs(%e : tensor<3x4xf32>) {
  ^bb0(%in: i64, %out: f32):
    %row = arith.index_cast %in : i64 to index
    %col = linalg.index 1 : index
    %v = tensor.extract %t[%row, %col] : tensor<16x4xf32>
    linalg.yield %v : f32
  } -> tensor<3x4xf32>
  return %o : tensor<3x4xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 2>} : () -> ()
// A partial sum (a sum loop's result: a gradient under ZeRO) read by an update on its rows' blocks
// (a reduce_scatter) and by a sum of squares whole (an all_reduce): the sum of squares reads the same blocks
// instead (shared blocks), a sum loop over x of its blocks' sums; an elementwise reader (no reduction over the
// rows) still reads it whole.
// CHECK-LABEL: func.func @shared_blocks_of_a_partial_sum
// CHECK: %[[G:[0-9]+]] = "slicer.loop"
// CHECK: action = #slicer.sum
// CHECK: action = #slicer.tile<0
// CHECK: "slicer.loop"() ({
// CHECK-NEXT: ^bb0(%[[R:.*]]: !slicer.range<"x"
// CHECK-NEXT: %[[B:.*]] = "slicer.slice"(%[[G]], %[[R]]) {dim = 0 : i64} {{.*}} -> tensor<2x4xf32>
// CHECK-NEXT: linalg.generic {{.*}} ins(%[[B]] : tensor<2x4xf32>)
// CHECK: }) {action = #slicer.sum, {{.*}}slicer.rule = "forward: linalg.generic: d0 is a reduction
// CHECK: arith.negf %[[G]] : tensor<4x4xf32>
func.func @shared_blocks_of_a_partial_sum(%w: tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<f32>, tensor<4x4xf32>) {
  %g = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    %e = math.exp %w : tensor<4x4xf32>
    tosa.yield %e : tensor<4x4xf32>
  }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<4x4xf32>
  %u = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    %b = "slicer.slice"(%g, %r) {dim = 0 : i64} : (tensor<4x4xf32>, !slicer.range<"x", 2>) -> tensor<2x4xf32>
    %n = math.sqrt %b : tensor<2x4xf32>
    tosa.yield %n : tensor<2x4xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<4x4xf32>
  %zero = arith.constant dense<0.0> : tensor<f32>
  %s = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> ()>],
                       iterator_types = ["reduction", "reduction"]} ins(%g : tensor<4x4xf32>) outs(%zero : tensor<f32>) {
  ^bb0(%in: f32, %acc: f32):
    %sq = arith.mulf %in, %in : f32
    %t = arith.addf %sq, %acc : f32
    linalg.yield %t : f32
  } -> tensor<f32>
  %neg = arith.negf %g : tensor<4x4xf32>
  return %u, %s, %neg : tensor<4x4xf32>, tensor<f32>, tensor<4x4xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 2>} : () -> ()
// A partial sum over x whose terms are tiled over y (data parallel x Megatron: a sum loop yielding a tile
// loop): a reduction over the tiled dim reads each device's own block (a sum loop over y), not the whole value
// (which would all-gather it over y).
// CHECK-LABEL: func.func @shared_blocks_of_a_tiled_partial_sum
// CHECK: %[[G:[0-9]+]] = "slicer.loop"
// CHECK: action = #slicer.sum
// CHECK: "slicer.loop"() ({
// CHECK-NEXT: ^bb0(%[[R:.*]]: !slicer.range<"y"
// CHECK-NEXT: %[[B:.*]] = "slicer.slice"(%[[G]], %[[R]]) {dim = 1 : i64} {{.*}} -> tensor<4x2xf32>
// CHECK-NEXT: linalg.generic {{.*}} ins(%[[B]] : tensor<4x2xf32>)
// CHECK: }) {action = #slicer.sum
func.func @shared_blocks_of_a_tiled_partial_sum(%w: tensor<4x4xf32>) -> tensor<f32> {
  %g = "slicer.loop"() ({
  ^bb0(%rx: !slicer.range<"x", 2>):
    %m = "slicer.loop"() ({
    ^bb0(%ry: !slicer.range<"y", 2>):
      %wb = "slicer.slice"(%w, %ry) {dim = 1 : i64} : (tensor<4x4xf32>, !slicer.range<"y", 2>) -> tensor<4x2xf32>
      %e = math.exp %wb : tensor<4x2xf32>
      tosa.yield %e : tensor<4x2xf32>
    }) {action = #slicer.tile<1>, mesh = @mesh} : () -> tensor<4x4xf32>
    tosa.yield %m : tensor<4x4xf32>
  }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<4x4xf32>
  %zero = arith.constant dense<0.0> : tensor<f32>
  %s = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> ()>],
                       iterator_types = ["reduction", "reduction"]} ins(%g : tensor<4x4xf32>) outs(%zero : tensor<f32>) {
  ^bb0(%in: f32, %acc: f32):
    %sq = arith.mulf %in, %in : f32
    %t = arith.addf %sq, %acc : f32
    linalg.yield %t : f32
  } -> tensor<f32>
  return %s : tensor<f32>
}
