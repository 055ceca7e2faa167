// IR annotations (this file): slicer.sharding on arguments/results, slicer.annotate on values.
// RUN: slicer-opt %s -split-input-file -p slicer-apply-tactics | FileCheck %s
// Annotations are consumed, so applying twice equals applying once:
// RUN: slicer-opt %s -split-input-file -p slicer-apply-tactics,slicer-apply-tactics | FileCheck %s
//
// The schedule on the command line, on the global 2-layer MLP of examples/mlp.mlir
// (%x: 8x16, %w1: 16x32, %b1: 32, %w2: 32x16); the mesh x=2,y=4 is inserted as @mesh.
// RUN: slicer-opt %S/../../examples/mlp.mlir -p 'slicer-apply-tactics{mesh=x=2,y=4 tactics=arg0.0=x}' | FileCheck %s --check-prefix=DATA
// RUN: slicer-opt %S/../../examples/mlp.mlir -p 'slicer-apply-tactics{mesh=x=2,y=4 tactics=arg1.1=y;arg3.0=y}' | FileCheck %s --check-prefix=MEGATRON
// The output is valid for the real mlir-opt too:
// RUN: slicer-opt %S/../../examples/mlp.mlir -p 'slicer-apply-tactics{mesh=x=2,y=4 tactics=arg1.1=y;arg3.0=y}' | mlir-opt --irdl-file=%irdl | FileCheck %s --check-prefix=MEGATRON
// RUN: slicer-opt %S/../../examples/mlp.mlir -p 'slicer-apply-tactics{mesh=x=2,y=4 tactics=arg0.0=x,y}' | FileCheck %s --check-prefix=AXES
// Each loop records its tactic and the tactic's place in the schedule (earlier wins in propagation):
// RUN: slicer-opt %S/../../examples/mlp.mlir -p 'slicer-apply-tactics{mesh=x=2,y=4 tactics=arg1.1=y;arg3.0=y}' | FileCheck %s --check-prefix=PROVENANCE
// PROVENANCE: mesh = @mesh, slicer.priority = 0 : i64, slicer.tactic = "Tile(arg=1, dim=1, axes='y')"} : () -> tensor<16x32xf32>
// PROVENANCE: mesh = @mesh, slicer.priority = 1 : i64, slicer.tactic = "Tile(arg=3, dim=0, axes='y')"} : () -> tensor<32x16xf32>
// RUN: slicer-opt %S/../../examples/mlp.mlir -p 'slicer-apply-tactics{mesh=x=2,y=4 tactics=result0.0=x}' | FileCheck %s --check-prefix=RESULT
// RUN: slicer-opt %S/../../examples/mlp.mlir -p 'slicer-apply-tactics{mesh=x=2,y=4 tactics=arg2=replicated;result0=replicated}' | FileCheck %s --check-prefix=REPLICATE
// Arguments named with slicer.name are named in the schedule too (what a positional tactic does):
// RUN: slicer-opt %S/Inputs/named-mlp.mlir -p 'slicer-apply-tactics{mesh=x=2,y=4 tactics=fc1.weight.1=y;fc2.weight.0=y}' | FileCheck %s --check-prefix=NAMED
// NAMED: "slicer.loop"() ({
// NAMED: "slicer.slice"(%arg1, %{{.*}}) {dim = 1 : i64}
// NAMED: slicer.tactic = "Tile(arg='fc1.weight', dim=1, axes='y')"} : () -> tensor<16x32xf32>
// NAMED: "slicer.slice"(%arg3, %{{.*}}) {dim = 0 : i64}
// NAMED: slicer.tactic = "Tile(arg='fc2.weight', dim=0, axes='y')"} : () -> tensor<32x16xf32>
// RUN: not slicer-opt %S/Inputs/named-mlp.mlir -p 'slicer-apply-tactics{mesh=x=2,y=4 tactics=fc1.wieght.1=y}' 2>&1 | FileCheck %s --check-prefix=UNKNOWN-NAME
// UNKNOWN-NAME: error: Tile(arg='fc1.wieght', dim=1, axes='y'): @mlp has no argument named 'fc1.wieght' (did you mean 'fc1.weight'{{.*}}); its arguments are named: x, fc1.weight, fc1.bias, fc2.weight
//
// Errors: one case per tactic error, each run with tactics=arg1.1=y.
// RUN: slicer-opt %S/Inputs/apply-tactics-invalid.mlir -split-input-file -verify-diagnostics -p 'slicer-apply-tactics{tactics=arg1.1=y}'
// RUN: not slicer-opt %s -p 'slicer-apply-tactics{tactics=arg0.x=y}' 2>&1 | FileCheck %s --check-prefix=SYNTAX
// RUN: not slicer-opt %S/../../examples/mlp.mlir -p 'slicer-apply-tactics{tactics=arg0.0=x}' 2>&1 | FileCheck %s --check-prefix=NOMESH

// DATA: "slicer.mesh"() {axes = ["x", "y"], shape = array<i64: 2, 4>, sym_name = "mesh"}
// DATA-LABEL: func.func @mlp
// DATA-SAME: (%[[X:[^:]*]]: tensor<8x16xf32>, %[[W1:[^:]*]]: tensor<16x32xf32>
// DATA-NEXT: %[[XT:.*]] = "slicer.loop"() ({
// DATA-NEXT: ^bb0(%[[R:.*]]: !slicer.range<"x", 2 : i64>):
// DATA-NEXT: %[[B:.*]] = "slicer.slice"(%[[X]], %[[R]]) {dim = 0 : i64} : (tensor<8x16xf32>, !slicer.range<"x", 2 : i64>) -> tensor<4x16xf32>
// DATA-NEXT: tosa.yield %[[B]] : tensor<4x16xf32>
// DATA-NEXT: }) {action = #slicer.tile<0 : i64>, mesh = @mesh{{.*}}} : () -> tensor<8x16xf32>
// DATA: linalg.matmul ins(%[[XT]], %[[W1]] : tensor<8x16xf32>, tensor<16x32xf32>)
// DATA-NOT: slicer.

// Megatron: the first weight by columns, the second by rows, both over y.
// MEGATRON-LABEL: func.func @mlp
// MEGATRON-SAME: (%[[X:[^:]*]]: tensor<8x16xf32>, %[[W1:[^:]*]]: tensor<16x32xf32>, %[[B1:[^:]*]]: tensor<32xf32>, %[[W2:[^:]*]]: tensor<32x16xf32>)
// MEGATRON-NEXT: %[[W1T:.*]] = "slicer.loop"() ({
// MEGATRON-NEXT: ^bb0(%[[R1:.*]]: !slicer.range<"y", 4 : i64>):
// MEGATRON-NEXT: %[[B:.*]] = "slicer.slice"(%[[W1]], %[[R1]]) {dim = 1 : i64} : (tensor<16x32xf32>, !slicer.range<"y", 4 : i64>) -> tensor<16x8xf32>
// MEGATRON-NEXT: tosa.yield %[[B]] : tensor<16x8xf32>
// MEGATRON-NEXT: }) {action = #slicer.tile<1 : i64>, mesh = @mesh{{.*}}} : () -> tensor<16x32xf32>
// MEGATRON-NEXT: %[[W2T:.*]] = "slicer.loop"() ({
// MEGATRON-NEXT: ^bb0(%[[R2:.*]]: !slicer.range<"y", 4 : i64>):
// MEGATRON-NEXT: %[[C:.*]] = "slicer.slice"(%[[W2]], %[[R2]]) {dim = 0 : i64} : (tensor<32x16xf32>, !slicer.range<"y", 4 : i64>) -> tensor<8x16xf32>
// MEGATRON-NEXT: tosa.yield %[[C]] : tensor<8x16xf32>
// MEGATRON-NEXT: }) {action = #slicer.tile<0 : i64>, mesh = @mesh{{.*}}} : () -> tensor<32x16xf32>
// MEGATRON: linalg.matmul ins(%[[X]], %[[W1T]] :
// MEGATRON: linalg.generic {{.*}} ins(%{{.*}}, %[[B1]] :
// MEGATRON: linalg.matmul ins(%{{.*}}, %[[W2T]] :

// Several axes on one dim: one loop over the product range (block idx(x) * |y| + idx(y)).
// AXES-LABEL: func.func @mlp
// AXES-NEXT: %[[XT:.*]] = "slicer.loop"() ({
// AXES-NEXT: ^bb0(%[[R:.*]]: !slicer.range<["x", "y"], 8 : i64>):
// AXES-NEXT: %[[B:.*]] = "slicer.slice"(%arg0, %[[R]]) {dim = 0 : i64} : (tensor<8x16xf32>, !slicer.range<["x", "y"], 8 : i64>) -> tensor<1x16xf32>
// AXES-NEXT: tosa.yield %[[B]] : tensor<1x16xf32>
// AXES-NEXT: }) {action = #slicer.tile<0 : i64>, mesh = @mesh{{.*}}} : () -> tensor<8x16xf32>
// AXES-NOT: slicer.loop
// AXES: linalg.matmul ins(%[[XT]],

// A result: the returned value is wrapped just before the return.
// RESULT-LABEL: func.func @mlp
// RESULT-NOT: slicer.loop
// RESULT: linalg.matmul
// RESULT: %[[Y:.*]] = linalg.matmul
// RESULT-NEXT: %[[YT:.*]] = "slicer.loop"() ({
// RESULT-NEXT: ^bb0(%[[R:.*]]: !slicer.range<"x", 2 : i64>):
// RESULT-NEXT: %[[B:.*]] = "slicer.slice"(%[[Y]], %[[R]]) {dim = 0 : i64} : (tensor<8x16xf32>, !slicer.range<"x", 2 : i64>) -> tensor<4x16xf32>
// RESULT-NEXT: tosa.yield %[[B]] : tensor<4x16xf32>
// RESULT-NEXT: }) {action = #slicer.tile<0 : i64>, mesh = @mesh{{.*}}} : () -> tensor<8x16xf32>
// RESULT-NEXT: return %[[YT]] : tensor<8x16xf32>

// Replicate creates no loop, only an all-empty annotation the later passes see.
// REPLICATE-LABEL: func.func @mlp
// REPLICATE-SAME: %[[B1:[^:]*]]: tensor<32xf32>
// REPLICATE-NEXT: %[[B1R:.*]] = "slicer.annotate"(%[[B1]]) {sharding = #slicer.sharding<@mesh, {{\[\[\]\]}}>} : (tensor<32xf32>) -> tensor<32xf32>
// REPLICATE-NOT: slicer.loop
// REPLICATE: linalg.generic {{.*}} ins(%{{.*}}, %[[B1R]] :
// REPLICATE: %[[Y:.*]] = linalg.matmul
// REPLICATE-NEXT: %[[YR:.*]] = "slicer.annotate"(%[[Y]]) {sharding = #slicer.sharding<@mesh, {{\[\[\], \[\]\]}}>}
// REPLICATE-NEXT: return %[[YR]]

// SYNTAX: slicer-opt: error: pass 'slicer-apply-tactics' option 'tactics': cannot parse tactic 'arg0.x=y': expected argI.D=AXES
// NOMESH: mlp.mlir:5:1: error: tactics need a mesh and the module declares no slicer.mesh: give one

"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 4>} : () -> ()

// Annotated arguments and a result with two tiled dims (the later dim's loop wraps the earlier one's); the result
// keeps the tactics that laid it out (slicer.tactic), which the partitioned function reports.
// CHECK-LABEL: func.func @args
// CHECK-SAME: (%[[A:[^:]*]]: tensor<8x16xf32>, %[[B:[^:]*]]: tensor<16x8xf32>) -> (tensor<8x8xf32> {slicer.tactic = "Tile(result=0, dim=0, axes='x') from the slicer.sharding of result #0 of @args; Tile(result=0, dim=1, axes='y') from the slicer.sharding of result #0 of @args"}) {
// CHECK-NEXT: %[[AT:.*]] = "slicer.loop"() ({
// CHECK-NEXT: ^bb0(%[[R0:.*]]: !slicer.range<"x", 2 : i64>):
// CHECK-NEXT: %[[S0:.*]] = "slicer.slice"(%[[A]], %[[R0]]) {dim = 0 : i64} : (tensor<8x16xf32>, !slicer.range<"x", 2 : i64>) -> tensor<4x16xf32>
// CHECK-NEXT: tosa.yield %[[S0]] : tensor<4x16xf32>
// CHECK-NEXT: }) {action = #slicer.tile<0 : i64>, mesh = @mesh{{.*}}} : () -> tensor<8x16xf32>
// CHECK-NEXT: %[[BT:.*]] = "slicer.loop"() ({
// CHECK-NEXT: ^bb0(%[[R1:.*]]: !slicer.range<"y", 4 : i64>):
// CHECK-NEXT: %[[S1:.*]] = "slicer.slice"(%[[B]], %[[R1]]) {dim = 1 : i64} : (tensor<16x8xf32>, !slicer.range<"y", 4 : i64>) -> tensor<16x2xf32>
// CHECK-NEXT: tosa.yield %[[S1]] : tensor<16x2xf32>
// CHECK-NEXT: }) {action = #slicer.tile<1 : i64>, mesh = @mesh{{.*}}} : () -> tensor<16x8xf32>
// CHECK: %[[C:.*]] = linalg.matmul ins(%[[AT]], %[[BT]] :
// CHECK-NEXT: %[[CX:.*]] = "slicer.loop"() ({
// CHECK-NEXT: ^bb0(%[[R2:.*]]: !slicer.range<"x", 2 : i64>):
// CHECK-NEXT: %[[S2:.*]] = "slicer.slice"(%[[C]], %[[R2]]) {dim = 0 : i64} : (tensor<8x8xf32>, !slicer.range<"x", 2 : i64>) -> tensor<4x8xf32>
// CHECK-NEXT: tosa.yield %[[S2]] : tensor<4x8xf32>
// CHECK-NEXT: }) {action = #slicer.tile<0 : i64>, mesh = @mesh{{.*}}} : () -> tensor<8x8xf32>
// CHECK-NEXT: %[[CY:.*]] = "slicer.loop"() ({
// CHECK-NEXT: ^bb0(%[[R3:.*]]: !slicer.range<"y", 4 : i64>):
// CHECK-NEXT: %[[S3:.*]] = "slicer.slice"(%[[CX]], %[[R3]]) {dim = 1 : i64} : (tensor<8x8xf32>, !slicer.range<"y", 4 : i64>) -> tensor<8x2xf32>
// CHECK-NEXT: tosa.yield %[[S3]] : tensor<8x2xf32>
// CHECK-NEXT: }) {action = #slicer.tile<1 : i64>, mesh = @mesh{{.*}}} : () -> tensor<8x8xf32>
// CHECK-NEXT: return %[[CY]] : tensor<8x8xf32>
// CHECK-NOT: slicer.sharding
func.func @args(%a: tensor<8x16xf32> {slicer.sharding = #slicer.sharding<@mesh, [["x"], []]>},
                %b: tensor<16x8xf32> {slicer.sharding = #slicer.sharding<@mesh, [[], ["y"]]>})
    -> (tensor<8x8xf32> {slicer.sharding = #slicer.sharding<@mesh, [["x"], ["y"]]>}) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x8xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<8x8xf32>) -> tensor<8x8xf32>
  %c = linalg.matmul ins(%a, %b : tensor<8x16xf32>, tensor<16x8xf32>) outs(%f : tensor<8x8xf32>) -> tensor<8x8xf32>
  return %c : tensor<8x8xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 4>} : () -> ()

// A tiling slicer.annotate becomes a loop right after it (the annotation is consumed);
// an all-empty one (replicate) stays; a replicated argument gets one at the top.
// CHECK-LABEL: func.func @values
// CHECK-SAME: (%[[A:[^:]*]]: tensor<8x16xf32>, %[[V:[^:]*]]: tensor<16xf32>) -> tensor<8x16xf32> {
// CHECK-NEXT: %[[VR:.*]] = "slicer.annotate"(%[[V]]) {sharding = #slicer.sharding<@mesh, {{\[\[\]\]}}>} : (tensor<16xf32>) -> tensor<16xf32>
// CHECK-NEXT: %[[N:.*]] = arith.negf %[[A]] : tensor<8x16xf32>
// CHECK-NEXT: %[[NT:.*]] = "slicer.loop"() ({
// CHECK-NEXT: ^bb0(%[[R:.*]]: !slicer.range<["y", "x"], 8 : i64>):
// CHECK-NEXT: %[[S:.*]] = "slicer.slice"(%[[N]], %[[R]]) {dim = 0 : i64} : (tensor<8x16xf32>, !slicer.range<["y", "x"], 8 : i64>) -> tensor<1x16xf32>
// CHECK-NEXT: tosa.yield %[[S]] : tensor<1x16xf32>
// CHECK-NEXT: }) {action = #slicer.tile<0 : i64>, mesh = @mesh{{.*}}} : () -> tensor<8x16xf32>
// CHECK: %[[G:.*]] = linalg.generic {{.*}} ins(%[[NT]], %[[VR]] :
// CHECK: %[[GR:.*]] = "slicer.annotate"(%[[G]]) {sharding = #slicer.sharding<@mesh, {{\[\[\], \[\]\]}}>}
// CHECK-NEXT: return %[[GR]]
// CHECK-NOT: "slicer.annotate"
func.func @values(%a: tensor<8x16xf32>, %v: tensor<16xf32> {slicer.sharding = #slicer.sharding<@mesh, [[]]>}) -> tensor<8x16xf32> {
  %n = arith.negf %a : tensor<8x16xf32>
  %t = "slicer.annotate"(%n) {sharding = #slicer.sharding<@mesh, [["y", "x"], []]>} : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %e = tensor.empty() : tensor<8x16xf32>
  %s = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (j)>, affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%t, %v : tensor<8x16xf32>, tensor<16xf32>) outs(%e : tensor<8x16xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %r = arith.addf %x, %y : f32
    linalg.yield %r : f32
  } -> tensor<8x16xf32>
  %rep = "slicer.annotate"(%s) {sharding = #slicer.sharding<@mesh, [[], []]>} : (tensor<8x16xf32>) -> tensor<8x16xf32>
  return %rep : tensor<8x16xf32>
}
