// RUN: slicer-opt %s -split-input-file -p slicer-partition | FileCheck %s
// The SPMD output is upstream MLIR (shard + linalg + tensor), plus `slicer.permute` where the plan permutes:
// RUN: slicer-opt %s -split-input-file -p slicer-partition | mlir-opt --irdl-file=%irdl -split-input-file | FileCheck %s
// The same programs as the examples, whole (one all_reduce / none / one over y only):
// RUN: slicer-opt %S/../../examples/megatron_mlp_loops.mlir -p slicer-partition | FileCheck %s --check-prefix=EX-MEGATRON
// RUN: slicer-opt %S/../../examples/data_parallel_mlp_loops.mlir -p slicer-partition | FileCheck %s --check-prefix=EX-DATA
// RUN: slicer-opt %S/../../examples/mlp_2d_loops.mlir -p slicer-partition | FileCheck %s --check-prefix=EX-2D
// RUN: slicer-opt %S/../../examples/attention_heads_loops.mlir -p slicer-partition | FileCheck %s --check-prefix=EX-ATTN
// A dim rotated by one block of two: one permute (device 1 sends its block to 0, 0 to 1), no gather:
// RUN: slicer-opt %S/Inputs/rotation.mlir -p 'slicer-apply-tactics{mesh=x=2 tactics=arg0.0=x},slicer-propagate,slicer-partition,slicer-verify' | FileCheck %s --check-prefix=ROTATION
// The collectives report (stderr): why each collective exists, where from, and the bytes each device receives.
// RUN: slicer-opt %S/../../examples/mlp_2d_loops.mlir -p slicer-partition --print-collectives 2>&1 >/dev/null | FileCheck %s --check-prefix=REPORT
// bf16 partitions as f32 does: local bf16 blocks, the partial sums reduced by an all_reduce of bf16 values:
// RUN: slicer-opt %S/Inputs/partition-bf16.mlir -p 'slicer-apply-tactics{mesh=x=2 tactics=arg0.1=x;arg1.0=x},slicer-propagate,slicer-partition,slicer-verify' | FileCheck %s --check-prefix=BF16
// BF16: func.func @f(%{{.*}}: tensor<8x32xbf16> {slicer.dist = "{{\[\[}}],[x]]"}, %{{.*}}: tensor<32x32xbf16> {slicer.dist = "{{\[\[}}x],[]]"})
// BF16: linalg.matmul {{.*}} ins(%{{.*}}, %{{.*}} : tensor<8x32xbf16>, tensor<32x32xbf16>)
// BF16: shard.all_reduce %{{.*}} on @mesh grid_axes = [0] {{.*}} : tensor<8x32xbf16> -> tensor<8x32xbf16>

// REPORT: @mlp on mesh x=2,y=2
// REPORT-NEXT: result #0: {{\[\[}}x],[]] (default: the propagated type, partial sums reduced (no sharding was requested))
// REPORT-NEXT: 1. shard.all_reduce over [y] 8x32 -> 8x32 -> {{\[\[}}x],[]]: 1024 B received per device
// REPORT-NEXT: why: all_reduce: result #0 of @mlp has no requested sharding
// REPORT-SAME: source: result of the tile<0> loop over [x] yielding partial sums of the sum loop over [y] yielding 'linalg.matmul'
// REPORT-NEXT: at: {{.*}}mlp_2d_loops.mlir:36:3
// REPORT-NEXT: at: {{.*}}mlp_2d_loops.mlir:9:10
// REPORT-NEXT: at: {{.*}}mlp_2d_loops.mlir:12:13
// REPORT-NEXT: at: {{.*}}mlp_2d_loops.mlir:31:12
// REPORT-NEXT: total: 1 collectives, 1024 B received per device

// EX-MEGATRON: shard.grid @mesh(shape = 4) {slicer.axes = ["y"]}
// EX-MEGATRON: func.func @mlp(%{{.*}}: tensor<64x128xf32> {slicer.dist = "{{\[\[}}],[]]"}, %{{.*}}: tensor<128x64xf32> {slicer.dist = "{{\[\[}}],[y]]"}, %{{.*}}: tensor<64xf32> {slicer.dist = "{{\[\[}}y]]"}, %{{.*}}: tensor<64x128xf32> {slicer.dist = "{{\[\[}}y],[]]"})
// EX-MEGATRON-NOT: shard.all_
// EX-MEGATRON: %[[P:.*]] = linalg.matmul {slicer.dist = ["{{\[\[}}],[]] varying=[y]"]} ins(%{{.*}}, %{{.*}} : tensor<64x64xf32>, tensor<64x128xf32>)
// EX-MEGATRON-NOT: shard.
// EX-MEGATRON: %[[R:.*]] = shard.all_reduce %[[P]] on @mesh grid_axes = [0] {slicer.dist = ["{{\[\[}}],[]]"]} : tensor<64x128xf32> -> tensor<64x128xf32>
// EX-MEGATRON-NOT: shard.
// EX-MEGATRON: return %[[R]]

// EX-DATA: func.func @mlp(%{{.*}}: tensor<4x32xf32> {slicer.dist = "{{\[\[}}x],[]]"}, %{{.*}}: tensor<32x64xf32> {slicer.dist = "{{\[\[}}],[]]"}, %{{.*}}: tensor<64xf32> {slicer.dist = "{{\[\[}}]]"}, %{{.*}}: tensor<64x32xf32> {slicer.dist = "{{\[\[}}],[]]"}) -> (tensor<4x32xf32> {slicer.dist = "{{\[\[}}x],[]]", slicer.dist_source = "default"})
// EX-DATA-NOT: shard.all_
// EX-DATA-NOT: shard.reduce_scatter
// EX-DATA-NOT: slicer.permute
// EX-DATA: return

// EX-2D: func.func @mlp(%{{.*}}: tensor<8x32xf32> {slicer.dist = "{{\[\[}}x],[]]"}, %{{.*}}: tensor<32x32xf32> {slicer.dist = "{{\[\[}}],[y]]"}, %{{.*}}: tensor<32xf32> {slicer.dist = "{{\[\[}}y]]"}, %{{.*}}: tensor<32x32xf32> {slicer.dist = "{{\[\[}}y],[]]"})
// EX-2D-NOT: shard.all_
// EX-2D: linalg.matmul
// EX-2D-NOT: shard.all_
// EX-2D: %[[P:.*]] = linalg.matmul {slicer.dist = ["{{\[\[}}],[]] varying=[x,y]"]} ins(%{{.*}}, %{{.*}} : tensor<8x32xf32>, tensor<32x32xf32>) outs(%{{.*}} : tensor<8x32xf32>)
// EX-2D-NEXT: %[[R:.*]] = shard.all_reduce %[[P]] on @mesh grid_axes = [1] {slicer.dist = ["{{\[\[}}x],[]]"]} : tensor<8x32xf32> -> tensor<8x32xf32>
// EX-2D-NOT: shard.
// EX-2D: return %[[R]] : tensor<8x32xf32>

// EX-ATTN-COUNT-4: slicer.dist = "{{\[\[}}y],[],[]]"
// EX-ATTN-NOT: shard.all_
// EX-ATTN: math.exp
// EX-ATTN-NOT: shard.all_
// EX-ATTN: arith.divf
// EX-ATTN-NOT: shard.all_
// EX-ATTN: %[[PROJ:.*]] = linalg.generic {{.*}} ins(%{{.*}}, %{{.*}} : tensor<2x8x8xf32>, tensor<2x8x16xf32>)
// EX-ATTN-NOT: shard.all_
// EX-ATTN: %[[R:.*]] = shard.all_reduce %[[PROJ]] on @mesh grid_axes = [0]
// EX-ATTN-NOT: shard.
// EX-ATTN: return %[[R]]

// Megatron on a 1-D mesh: the weights arrive tiled (inferred from the slices), nothing moves until the one
// all_reduce of the sum loop's partial products at the function boundary.
// CHECK-LABEL: func.func @megatron
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32> {slicer.dist = "{{\[\[}}],[]]"}, %[[W1:.*]]: tensor<8x4xf32> {slicer.dist = "{{\[\[}}],[y]]"}, %[[W2:.*]]: tensor<4x8xf32> {slicer.dist = "{{\[\[}}y],[]]"})
// CHECK-SAME: -> (tensor<4x8xf32> {slicer.dist = "{{\[\[}}],[]]", slicer.dist_source = "default"})
// CHECK-SAME: attributes {slicer.spmd_mesh = "y=4"}
// CHECK-NOT: shard.
// CHECK: %[[H:.*]] = linalg.matmul {slicer.dist = ["{{\[\[}}],[]] varying=[y]"]} ins(%[[X]], %[[W1]] : tensor<4x8xf32>, tensor<8x4xf32>)
// CHECK-NOT: shard.
// CHECK: %[[P:.*]] = linalg.matmul {slicer.dist = ["{{\[\[}}],[]] varying=[y]"]} ins(%[[H]], %[[W2]] : tensor<4x4xf32>, tensor<4x8xf32>)
// CHECK-NEXT: %[[R:.*]] = shard.all_reduce %[[P]] on @mesh grid_axes = [0] {slicer.dist = ["{{\[\[}}],[]]"]} : tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK-NEXT: return %[[R]] : tensor<4x8xf32>
"slicer.mesh"() {sym_name = "mesh", axes = ["y"], shape = array<i64: 4>} : () -> ()
func.func @megatron(%x: tensor<4x8xf32>, %w1: tensor<8x16xf32>, %w2: tensor<16x8xf32>) -> tensor<4x8xf32> {
  %out = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"y", 4>):
    %w1b = "slicer.slice"(%w1, %r) {dim = 1 : i64} : (tensor<8x16xf32>, !slicer.range<"y", 4>) -> tensor<8x4xf32>
    %w2b = "slicer.slice"(%w2, %r) {dim = 0 : i64} : (tensor<16x8xf32>, !slicer.range<"y", 4>) -> tensor<4x8xf32>
    %zero = arith.constant 0.0 : f32
    %e1 = tensor.empty() : tensor<4x4xf32>
    %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<4x4xf32>) -> tensor<4x4xf32>
    %h = linalg.matmul ins(%x, %w1b : tensor<4x8xf32>, tensor<8x4xf32>) outs(%f1 : tensor<4x4xf32>) -> tensor<4x4xf32>
    %e2 = tensor.empty() : tensor<4x8xf32>
    %f2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<4x8xf32>) -> tensor<4x8xf32>
    %p = linalg.matmul ins(%h, %w2b : tensor<4x4xf32>, tensor<4x8xf32>) outs(%f2 : tensor<4x8xf32>) -> tensor<4x8xf32>
    tosa.yield %p : tensor<4x8xf32>
  }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<4x8xf32>
  return %out : tensor<4x8xf32>
}

// -----

// Megatron with sequence-parallel output requested: the annotation asks for the rows tiled over y (a
// reduce_scatter, half the traffic of an all_reduce); the result, requested replicated, then needs one
// all_gather.
// CHECK-LABEL: func.func @megatron_rs_ag
// CHECK-SAME: -> (tensor<4x8xf32> {slicer.dist = "{{\[\[}}],[]]", slicer.dist_source = "requested"})
// CHECK-NOT: shard.all_reduce
// CHECK: %[[P:.*]] = linalg.matmul {{.*}} ins(%{{.*}}, %{{.*}} : tensor<4x4xf32>, tensor<4x8xf32>)
// CHECK-NEXT: %[[RS:.*]] = shard.reduce_scatter %[[P]] on @mesh grid_axes = [0] scatter_axis = 0 {slicer.dist = ["{{\[\[}}y],[]]"]} : tensor<4x8xf32> -> tensor<1x8xf32>
// CHECK-NEXT: %[[AG:.*]] = shard.all_gather %[[RS]] on @mesh grid_axes = [0] gather_axis = 0 {slicer.dist = ["{{\[\[}}],[]]"]} : tensor<1x8xf32> -> tensor<4x8xf32>
// CHECK-NOT: shard.all_reduce
// CHECK: return %[[AG]]
"slicer.mesh"() {sym_name = "mesh", axes = ["y"], shape = array<i64: 4>} : () -> ()
func.func @megatron_rs_ag(%x: tensor<4x8xf32>, %w1: tensor<8x16xf32>, %w2: tensor<16x8xf32>)
    -> (tensor<4x8xf32> {slicer.sharding = #slicer.sharding<@mesh, [[], []]>}) {
  %out = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"y", 4>):
    %w1b = "slicer.slice"(%w1, %r) {dim = 1 : i64} : (tensor<8x16xf32>, !slicer.range<"y", 4>) -> tensor<8x4xf32>
    %w2b = "slicer.slice"(%w2, %r) {dim = 0 : i64} : (tensor<16x8xf32>, !slicer.range<"y", 4>) -> tensor<4x8xf32>
    %zero = arith.constant 0.0 : f32
    %e1 = tensor.empty() : tensor<4x4xf32>
    %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<4x4xf32>) -> tensor<4x4xf32>
    %h = linalg.matmul ins(%x, %w1b : tensor<4x8xf32>, tensor<8x4xf32>) outs(%f1 : tensor<4x4xf32>) -> tensor<4x4xf32>
    %e2 = tensor.empty() : tensor<4x8xf32>
    %f2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<4x8xf32>) -> tensor<4x8xf32>
    %p = linalg.matmul ins(%h, %w2b : tensor<4x4xf32>, tensor<4x8xf32>) outs(%f2 : tensor<4x8xf32>) -> tensor<4x8xf32>
    tosa.yield %p : tensor<4x8xf32>
  }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<4x8xf32>
  %seq = "slicer.annotate"(%out) {sharding = #slicer.sharding<@mesh, [["y"], []]>} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %seq : tensor<4x8xf32>
}

// -----

// A requested result sharding that tiles the partial dim: one reduce_scatter, nothing else.
// CHECK-LABEL: func.func @megatron_scattered
// CHECK-SAME: -> (tensor<1x8xf32> {slicer.dist = "{{\[\[}}y],[]]", slicer.dist_source = "requested"})
// CHECK: %[[RS:.*]] = shard.reduce_scatter %{{.*}} on @mesh grid_axes = [0] scatter_axis = 0
// CHECK-NOT: shard.all_
// CHECK: return %[[RS]] : tensor<1x8xf32>
"slicer.mesh"() {sym_name = "mesh", axes = ["y"], shape = array<i64: 4>} : () -> ()
func.func @megatron_scattered(%h: tensor<4x16xf32>, %w2: tensor<16x8xf32>)
    -> (tensor<4x8xf32> {slicer.sharding = #slicer.sharding<@mesh, [["y"], []]>}) {
  %out = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"y", 4>):
    %hb = "slicer.slice"(%h, %r) {dim = 1 : i64} : (tensor<4x16xf32>, !slicer.range<"y", 4>) -> tensor<4x4xf32>
    %w2b = "slicer.slice"(%w2, %r) {dim = 0 : i64} : (tensor<16x8xf32>, !slicer.range<"y", 4>) -> tensor<4x8xf32>
    %zero = arith.constant 0.0 : f32
    %e2 = tensor.empty() : tensor<4x8xf32>
    %f2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<4x8xf32>) -> tensor<4x8xf32>
    %p = linalg.matmul ins(%hb, %w2b : tensor<4x4xf32>, tensor<4x8xf32>) outs(%f2 : tensor<4x8xf32>) -> tensor<4x8xf32>
    tosa.yield %p : tensor<4x8xf32>
  }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<4x8xf32>
  return %out : tensor<4x8xf32>
}

// -----

// A value held whole and sliced: the device takes its own block locally (offset from its coordinate).
// CHECK-LABEL: func.func @local_slice
// CHECK-SAME: (%[[A:.*]]: tensor<8x4xf32> {slicer.dist = "{{\[\[}}],[]]"})
// CHECK: %[[IDX:[a-z_0-9]+]]:2 = shard.process_multi_index on @mesh axes = [0, 1] : index, index
// CHECK: %[[N:.*]] = arith.negf %[[A]] {slicer.dist = ["{{\[\[}}],[]]"]}
// CHECK: %[[C:.*]] = arith.constant 2 : index
// CHECK: %[[OFF:.*]] = arith.muli %[[IDX]]#1, %[[C]] : index
// CHECK: %[[B:.*]] = tensor.extract_slice %[[N]][%[[OFF]], 0] [2, 4] [1, 1] {slicer.dist = ["{{\[\[}}y],[]]"]} : tensor<8x4xf32> to tensor<2x4xf32>
// CHECK: %[[E:.*]] = math.exp %[[B]] {slicer.dist = ["{{\[\[}}],[]] varying=[y]"]}
// CHECK-NOT: shard.all
// CHECK: return %[[E]] : tensor<2x4xf32>
"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 4>} : () -> ()
func.func @local_slice(%a: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %n = arith.negf %a : tensor<8x4xf32>
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"y", 4>):
    %b = "slicer.slice"(%n, %r) {dim = 0 : i64} : (tensor<8x4xf32>, !slicer.range<"y", 4>) -> tensor<2x4xf32>
    %e = math.exp %b : tensor<2x4xf32>
    tosa.yield %e : tensor<2x4xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

// Explicit reshard of a result from [[x],[y]] to [[y],[x]] on a 2x2 mesh: the synthesizer's plan is one
// permute swapping the off-diagonal devices (shard has no general permutation: slicer.permute).
// CHECK-LABEL: func.func @reshard_2x2
// CHECK-SAME: (%{{.*}}: tensor<4x8xf32> {slicer.dist = "{{\[\[}}x],[y]]"}) -> (tensor<4x8xf32> {slicer.dist = "{{\[\[}}y],[x]]", slicer.dist_source = "requested"})
// CHECK: %[[E:.*]] = linalg.exp
// CHECK-NEXT: %[[P:.*]] = "slicer.permute"(%[[E]]) {grid = @mesh, pairs = array<i64: 1, 2, 2, 1>, slicer.dist = ["{{\[\[}}y],[x]]"]} : (tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: return %[[P]]
"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 2>} : () -> ()
func.func @reshard_2x2(%a: tensor<8x16xf32> {slicer.sharding = #slicer.sharding<@mesh, [["x"], ["y"]]>})
    -> (tensor<8x16xf32> {slicer.sharding = #slicer.sharding<@mesh, [["y"], ["x"]]>}) {
  %0 = "slicer.loop"() ({
  ^bb0(%rx: !slicer.range<"x", 2>):
    %ab = "slicer.slice"(%a, %rx) {dim = 0 : i64} : (tensor<8x16xf32>, !slicer.range<"x", 2>) -> tensor<4x16xf32>
    %1 = "slicer.loop"() ({
    ^bb0(%ry: !slicer.range<"y", 2>):
      %abb = "slicer.slice"(%ab, %ry) {dim = 1 : i64} : (tensor<4x16xf32>, !slicer.range<"y", 2>) -> tensor<4x8xf32>
      %e = tensor.empty() : tensor<4x8xf32>
      %ex = linalg.exp ins(%abb : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>
      tosa.yield %ex : tensor<4x8xf32>
    }) {action = #slicer.tile<1>, mesh = @mesh} : () -> tensor<4x16xf32>
    tosa.yield %1 : tensor<4x16xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}

// -----

// The same reshard on a 2x4 mesh, with sub-axes (docs/redistribution.md): y = y:(1)2 (major) x y:(2)2
// (minor). A permute swaps the roles of x and y:(1)2, then an all_to_all over y:(2)2 alone, on a grid whose
// axes are the parts (same devices, same ranks): 768 KiB per device at 1024x1024 instead of the 960 KiB
// of three all_to_alls over whole axes.
// CHECK: shard.grid @mesh_y2x2(shape = 2x2x2) {slicer.axes = ["x", "y:(1)2", "y:(2)2"], slicer.refines = @mesh}
// CHECK-LABEL: func.func @reshard_2x4
// CHECK-SAME: (%{{.*}}: tensor<4x4xf32> {slicer.dist = "{{\[\[}}x],[y]]"}) -> (tensor<2x8xf32> {slicer.dist = "{{\[\[}}y],[x]]", slicer.dist_source = "requested"})
// CHECK: %[[E:.*]] = linalg.exp
// CHECK-NEXT: %[[P:.*]] = "slicer.permute"(%[[E]]) {grid = @mesh, pairs = array<i64: 2, 4, 3, 5, 4, 2, 5, 3>, slicer.dist = ["{{\[\[}}y:(1)2],[x,y:(2)2]]"]} : (tensor<4x4xf32>) -> tensor<4x4xf32>
// CHECK-NEXT: %[[T:.*]] = shard.all_to_all %[[P]] on @mesh_y2x2 grid_axes = [2] split_axis = 0 concat_axis = 1 {slicer.dist = ["{{\[\[}}y],[x]]"]} : tensor<4x4xf32> -> tensor<2x8xf32>
// CHECK-NEXT: return %[[T]]
"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 4>} : () -> ()
func.func @reshard_2x4(%a: tensor<8x16xf32> {slicer.sharding = #slicer.sharding<@mesh, [["x"], ["y"]]>})
    -> (tensor<8x16xf32> {slicer.sharding = #slicer.sharding<@mesh, [["y"], ["x"]]>}) {
  %0 = "slicer.loop"() ({
  ^bb0(%rx: !slicer.range<"x", 2>):
    %ab = "slicer.slice"(%a, %rx) {dim = 0 : i64} : (tensor<8x16xf32>, !slicer.range<"x", 2>) -> tensor<4x16xf32>
    %1 = "slicer.loop"() ({
    ^bb0(%ry: !slicer.range<"y", 4>):
      %abb = "slicer.slice"(%ab, %ry) {dim = 1 : i64} : (tensor<4x16xf32>, !slicer.range<"y", 4>) -> tensor<4x4xf32>
      %e = tensor.empty() : tensor<4x4xf32>
      %ex = linalg.exp ins(%abb : tensor<4x4xf32>) outs(%e : tensor<4x4xf32>) -> tensor<4x4xf32>
      tosa.yield %ex : tensor<4x4xf32>
    }) {action = #slicer.tile<1>, mesh = @mesh} : () -> tensor<4x16xf32>
    tosa.yield %1 : tensor<4x16xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}

// -----

// Partial sums added before one reduction (Megatron's backward: dq Wq + dk Wk + dv Wv, each a sum loop over
// y): the elementwise sum (a * 2 + b) - c is linear in the three partial inputs, so each device adds its
// terms and one all_reduce of the sum replaces three; the scale 2 is free (a constant).
// CHECK-LABEL: func.func @partial_terms_added
// CHECK-NOT: shard.
// CHECK: %[[S:.*]] = linalg.generic {{.*}}slicer.dist = ["{{\[\[}}],[]] partial=[y]"]
// CHECK-NOT: shard.
// CHECK: %[[R:.*]] = shard.all_reduce %[[S]] on @mesh grid_axes = [0]
// CHECK-NOT: shard.
// CHECK: return %[[R]]
"slicer.mesh"() {sym_name = "mesh", axes = ["y"], shape = array<i64: 2>} : () -> ()
func.func @partial_terms_added(%x: tensor<4x8xf32>, %wa: tensor<8x8xf32>, %wb: tensor<8x8xf32>, %wc: tensor<8x8xf32>) -> tensor<4x8xf32> {
  %a = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"y", 2>):
    %xb = "slicer.slice"(%x, %r) {dim = 1 : i64} : (tensor<4x8xf32>, !slicer.range<"y", 2>) -> tensor<4x4xf32>
    %wb0 = "slicer.slice"(%wa, %r) {dim = 0 : i64} : (tensor<8x8xf32>, !slicer.range<"y", 2>) -> tensor<4x8xf32>
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<4x8xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>
    %p = linalg.matmul ins(%xb, %wb0 : tensor<4x4xf32>, tensor<4x8xf32>) outs(%f : tensor<4x8xf32>) -> tensor<4x8xf32>
    tosa.yield %p : tensor<4x8xf32>
  }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<4x8xf32>
  %b = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"y", 2>):
    %xb = "slicer.slice"(%x, %r) {dim = 1 : i64} : (tensor<4x8xf32>, !slicer.range<"y", 2>) -> tensor<4x4xf32>
    %wb1 = "slicer.slice"(%wb, %r) {dim = 0 : i64} : (tensor<8x8xf32>, !slicer.range<"y", 2>) -> tensor<4x8xf32>
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<4x8xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>
    %p = linalg.matmul ins(%xb, %wb1 : tensor<4x4xf32>, tensor<4x8xf32>) outs(%f : tensor<4x8xf32>) -> tensor<4x8xf32>
    tosa.yield %p : tensor<4x8xf32>
  }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<4x8xf32>
  %c = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"y", 2>):
    %xb = "slicer.slice"(%x, %r) {dim = 1 : i64} : (tensor<4x8xf32>, !slicer.range<"y", 2>) -> tensor<4x4xf32>
    %wb2 = "slicer.slice"(%wc, %r) {dim = 0 : i64} : (tensor<8x8xf32>, !slicer.range<"y", 2>) -> tensor<4x8xf32>
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<4x8xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>
    %p = linalg.matmul ins(%xb, %wb2 : tensor<4x4xf32>, tensor<4x8xf32>) outs(%f : tensor<4x8xf32>) -> tensor<4x8xf32>
    tosa.yield %p : tensor<4x8xf32>
  }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<4x8xf32>
  %e = tensor.empty() : tensor<4x8xf32>
  %s = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]} ins(%a, %b, %c : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%ia: f32, %ib: f32, %ic: f32, %o: f32):
    %two = arith.constant 2.0 : f32
    %a2 = arith.mulf %ia, %two : f32
    %ab = arith.addf %a2, %ib : f32
    %abc = arith.subf %ab, %ic : f32
    linalg.yield %abc : f32
  } -> tensor<4x8xf32>
  return %s : tensor<4x8xf32>
}

// -----

// Not linear (a product of two partial sums): each is reduced before the op, which computes replicated.
// CHECK-LABEL: func.func @partial_terms_multiplied
// CHECK-COUNT-2: shard.all_reduce
// CHECK-NOT: shard.
// CHECK: linalg.generic {{.*}}slicer.dist = ["{{\[\[}}],[]]"]
// CHECK-NOT: shard.
// CHECK: return
"slicer.mesh"() {sym_name = "mesh", axes = ["y"], shape = array<i64: 2>} : () -> ()
func.func @partial_terms_multiplied(%x: tensor<4x8xf32>, %wa: tensor<8x8xf32>, %wb: tensor<8x8xf32>) -> tensor<4x8xf32> {
  %a = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"y", 2>):
    %xb = "slicer.slice"(%x, %r) {dim = 1 : i64} : (tensor<4x8xf32>, !slicer.range<"y", 2>) -> tensor<4x4xf32>
    %wb0 = "slicer.slice"(%wa, %r) {dim = 0 : i64} : (tensor<8x8xf32>, !slicer.range<"y", 2>) -> tensor<4x8xf32>
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<4x8xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>
    %p = linalg.matmul ins(%xb, %wb0 : tensor<4x4xf32>, tensor<4x8xf32>) outs(%f : tensor<4x8xf32>) -> tensor<4x8xf32>
    tosa.yield %p : tensor<4x8xf32>
  }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<4x8xf32>
  %b = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"y", 2>):
    %xb = "slicer.slice"(%x, %r) {dim = 1 : i64} : (tensor<4x8xf32>, !slicer.range<"y", 2>) -> tensor<4x4xf32>
    %wb1 = "slicer.slice"(%wb, %r) {dim = 0 : i64} : (tensor<8x8xf32>, !slicer.range<"y", 2>) -> tensor<4x8xf32>
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<4x8xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>
    %p = linalg.matmul ins(%xb, %wb1 : tensor<4x4xf32>, tensor<4x8xf32>) outs(%f : tensor<4x8xf32>) -> tensor<4x8xf32>
    tosa.yield %p : tensor<4x8xf32>
  }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<4x8xf32>
  %e = tensor.empty() : tensor<4x8xf32>
  %s = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]} ins(%a, %b : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%ia: f32, %ib: f32, %o: f32):
    %ab = arith.mulf %ia, %ib : f32
    linalg.yield %ab : f32
  } -> tensor<4x8xf32>
  return %s : tensor<4x8xf32>
}

// -----

// A sum of partial sums inside a longer op (elementwise fusion put gradient clipping's sum of squares into the
// op taking its square root): the op is split into the sum, whose terms each device adds up (a and b partial
// over y, c over x, the replicated r once: each held by the first device over the axes it is not partial
// over, a local select), and the rest, reading the sum after ONE all_reduce over x and y (not one per term).
// CHECK-LABEL: func.func @partial_sum_in_a_longer_op
// CHECK-NOT: shard.all
// CHECK-COUNT-4: arith.select
// CHECK-NOT: shard.all
// CHECK: %[[S:.*]] = linalg.generic {{.*}}slicer.dist = ["[] partial=[x,y]"]
// CHECK-NOT: math.sqrt
// CHECK: linalg.yield
// CHECK-NEXT: }
// CHECK-NEXT: %[[R:.*]] = shard.all_reduce %[[S]] on @mesh grid_axes = [0, 1]
// CHECK-NEXT: linalg.generic {{.*}} ins(%arg0, %[[R]], %[[R]], %[[R]] :
// CHECK: math.sqrt
// CHECK-NOT: shard.
// CHECK: return
"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 2>} : () -> ()
func.func @partial_sum_in_a_longer_op(%r: tensor<f32>, %w: tensor<8xf32>, %v: tensor<8xf32>) -> tensor<f32> {
  %zero = arith.constant dense<0.0> : tensor<f32>
  %a = "slicer.loop"() ({
  ^bb0(%ry: !slicer.range<"y", 2>):
    %wb = "slicer.slice"(%w, %ry) {dim = 0 : i64} : (tensor<8xf32>, !slicer.range<"y", 2>) -> tensor<4xf32>
    %s = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> ()>], iterator_types = ["reduction"]} ins(%wb : tensor<4xf32>) outs(%zero : tensor<f32>) {
    ^bb0(%in: f32, %acc: f32):
      %sq = arith.mulf %in, %in : f32
      %t = arith.addf %sq, %acc : f32
      linalg.yield %t : f32
    } -> tensor<f32>
    tosa.yield %s : tensor<f32>
  }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<f32>
  %b = "slicer.loop"() ({
  ^bb0(%ry: !slicer.range<"y", 2>):
    %vb = "slicer.slice"(%v, %ry) {dim = 0 : i64} : (tensor<8xf32>, !slicer.range<"y", 2>) -> tensor<4xf32>
    %s = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> ()>], iterator_types = ["reduction"]} ins(%vb : tensor<4xf32>) outs(%zero : tensor<f32>) {
    ^bb0(%in: f32, %acc: f32):
      %t = arith.addf %in, %acc : f32
      linalg.yield %t : f32
    } -> tensor<f32>
    tosa.yield %s : tensor<f32>
  }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<f32>
  %c = "slicer.loop"() ({
  ^bb0(%rx: !slicer.range<"x", 2>):
    %wb = "slicer.slice"(%w, %rx) {dim = 0 : i64} : (tensor<8xf32>, !slicer.range<"x", 2>) -> tensor<4xf32>
    %s = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> ()>], iterator_types = ["reduction"]} ins(%wb : tensor<4xf32>) outs(%zero : tensor<f32>) {
    ^bb0(%in: f32, %acc: f32):
      %t = arith.addf %in, %acc : f32
      linalg.yield %t : f32
    } -> tensor<f32>
    tosa.yield %s : tensor<f32>
  }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<f32>
  %e = tensor.empty() : tensor<f32>
  %n = linalg.generic {indexing_maps = [affine_map<() -> ()>, affine_map<() -> ()>, affine_map<() -> ()>, affine_map<() -> ()>, affine_map<() -> ()>], iterator_types = []} ins(%r, %a, %b, %c : tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>) outs(%e : tensor<f32>) {
  ^bb0(%ir: f32, %ia: f32, %ib: f32, %ic: f32, %o: f32):
    %t = arith.addf %ir, %ia : f32
    %u = arith.addf %t, %ib : f32
    %s = arith.subf %u, %ic : f32
    %q = math.sqrt %s : f32
    %k = arith.mulf %q, %ir : f32
    linalg.yield %k : f32
  } -> tensor<f32>
  return %n : tensor<f32>
}

// ROTATION-LABEL: func.func @rotation
// ROTATION-NOT: shard.all_gather
// ROTATION-NOT: tensor.concat
// ROTATION: %[[BLOCK:.*]] = "slicer.permute"(%arg0) {grid = @mesh, pairs = array<i64: 1, 0, 0, 1>{{.*}}} : (tensor<2x2xf32>) -> tensor<2x2xf32>
// ROTATION: linalg.generic {{.*}} ins(%[[BLOCK]] : tensor<2x2xf32>)
// ROTATION-NOT: shard.all_gather
