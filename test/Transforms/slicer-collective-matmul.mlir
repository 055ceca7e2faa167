// RUN: slicer-opt %s -split-input-file -p 'slicer-collective-matmul{chunks=2}' | FileCheck %s
// The cost model (built-in figures) splits a large contraction and leaves a tiny one whole:
// Chunks stay apart when all_reduces are bucketed afterwards:
// RUN: slicer-opt %s -split-input-file -p 'slicer-collective-matmul{chunks=2},slicer-bucket-collectives' | FileCheck %s
// RUN: env SLICER_COST_MODEL=builtin slicer-opt %s -split-input-file -p slicer-collective-matmul | FileCheck %s --check-prefix=AUTO

// A Megatron second matmul: the partial sums [8, 16] all_reduced over y. Chunked along the output dim whose
// cut re-reads the fewest bytes (the columns: A is the smaller operand), each chunk's all_reduce right after it.
// CHECK-LABEL: func.func @megatron
// CHECK: %[[B0:.*]] = tensor.extract_slice %arg1[0, 0] [16, 8] [1, 1] {slicer.dist = ["{{\[\[}}y],[]]"]}
// CHECK: %[[E0:.*]] = tensor.empty() {{.*}} : tensor<8x8xf32>
// CHECK: %[[F0:.*]] = linalg.fill {{.*}} outs(%[[E0]] : tensor<8x8xf32>)
// CHECK: %[[P0:.*]] = linalg.matmul {slicer.dist = ["{{\[\[}}],[]] partial=[y]"]} ins(%arg0, %[[B0]] : tensor<8x16xf32>, tensor<16x8xf32>) outs(%[[F0]]
// CHECK: %[[R0:.*]] = shard.all_reduce %[[P0]] on @mesh grid_axes = [0] {slicer.chunk, slicer.dist = {{.*}}} : tensor<8x8xf32> -> tensor<8x8xf32>
// CHECK: %[[B1:.*]] = tensor.extract_slice %arg1[0, 8] [16, 8] [1, 1]
// CHECK: %[[P1:.*]] = linalg.matmul {{.*}} ins(%arg0, %[[B1]]
// CHECK: %[[R1:.*]] = shard.all_reduce %[[P1]] {{.*}} : tensor<8x8xf32> -> tensor<8x8xf32>
// CHECK: %[[W:.*]] = tensor.empty() {slicer.dist = ["{{\[\[}}],[]]"]} : tensor<8x16xf32>
// CHECK: %[[I0:.*]] = tensor.insert_slice %[[R0]] into %[[W]][0, 0] [8, 8] [1, 1]
// CHECK: %[[I1:.*]] = tensor.insert_slice %[[R1]] into %[[I0]][0, 8] [8, 8] [1, 1]
// CHECK: return %[[I1]]
// AUTO-LABEL: func.func @megatron
// AUTO: shard.all_reduce {{.*}} : tensor<8x16xf32>
// AUTO-NOT: shard.all_reduce
module {
  shard.grid @mesh(shape = 2) {slicer.axes = ["y"]}
  func.func @megatron(%arg0: tensor<8x16xf32> {slicer.dist = "[[],[y]]"}, %arg1: tensor<16x16xf32> {slicer.dist = "[[y],[]]"})
      -> (tensor<8x16xf32> {slicer.dist = "[[],[]]"}) attributes {slicer.spmd_mesh = "y=2"} {
    %cst = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() {slicer.dist = ["[[],[]]"]} : tensor<8x16xf32>
    %1 = linalg.fill {slicer.dist = ["[[],[]]"]} ins(%cst : f32) outs(%0 : tensor<8x16xf32>) -> tensor<8x16xf32>
    %2 = linalg.matmul {slicer.dist = ["[[],[]] partial=[y]"]} ins(%arg0, %arg1 : tensor<8x16xf32>, tensor<16x16xf32>) outs(%1 : tensor<8x16xf32>) -> tensor<8x16xf32>
    %3 = shard.all_reduce %2 on @mesh grid_axes = [0] {slicer.dist = ["[[],[]]"]} : tensor<8x16xf32> -> tensor<8x16xf32>
    return %3 : tensor<8x16xf32>
  }
}

// -----

// A reduce_scatter of dim 0: never cut along the scattered dim, so along dim 1.
// CHECK-LABEL: func.func @scatter
// CHECK: tensor.extract_slice %arg1[0, 0] [64, 16] [1, 1]
// CHECK: %[[P0:.*]] = linalg.matmul {{.*}} -> tensor<8x16xf32>
// CHECK: shard.reduce_scatter %[[P0]] on @mesh grid_axes = [0] scatter_axis = 0 {{.*}} : tensor<8x16xf32> -> tensor<4x16xf32>
// CHECK: tensor.extract_slice %arg1[0, 16] [64, 16] [1, 1]
// CHECK: shard.reduce_scatter {{.*}} : tensor<8x16xf32> -> tensor<4x16xf32>
// CHECK: tensor.insert_slice {{.*}}[0, 16] [4, 16] [1, 1] {{.*}} into tensor<4x32xf32>
// The cost model splits this one (a 2 MiB all_reduce after 0.27 GFLOP: the collective about as long as the
// compute) into 4 chunks of B's columns (A, re-read by every chunk, is the smaller operand):
// AUTO-LABEL: func.func @large
// AUTO-COUNT-4: shard.all_reduce {{.*}} : tensor<256x512xf32> -> tensor<256x512xf32>
// AUTO-NOT: shard.all_reduce
module {
  shard.grid @mesh(shape = 2) {slicer.axes = ["y"]}
  func.func @scatter(%arg0: tensor<8x64xf32> {slicer.dist = "[[],[y]]"}, %arg1: tensor<64x32xf32> {slicer.dist = "[[y],[]]"})
      -> (tensor<4x32xf32> {slicer.dist = "[[y],[]]"}) attributes {slicer.spmd_mesh = "y=2"} {
    %cst = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() {slicer.dist = ["[[],[]]"]} : tensor<8x32xf32>
    %1 = linalg.fill {slicer.dist = ["[[],[]]"]} ins(%cst : f32) outs(%0 : tensor<8x32xf32>) -> tensor<8x32xf32>
    %2 = linalg.matmul {slicer.dist = ["[[],[]] partial=[y]"]} ins(%arg0, %arg1 : tensor<8x64xf32>, tensor<64x32xf32>) outs(%1 : tensor<8x32xf32>) -> tensor<8x32xf32>
    %3 = shard.reduce_scatter %2 on @mesh grid_axes = [0] scatter_axis = 0 {slicer.dist = ["[[y],[]]"]} : tensor<8x32xf32> -> tensor<4x32xf32>
    return %3 : tensor<4x32xf32>
  }
  func.func @large(%arg0: tensor<256x256xf32> {slicer.dist = "[[],[y]]"}, %arg1: tensor<256x2048xf32> {slicer.dist = "[[y],[]]"})
      -> (tensor<256x2048xf32> {slicer.dist = "[[],[]]"}) attributes {slicer.spmd_mesh = "y=2"} {
    %cst = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() {slicer.dist = ["[[],[]]"]} : tensor<256x2048xf32>
    %1 = linalg.fill {slicer.dist = ["[[],[]]"]} ins(%cst : f32) outs(%0 : tensor<256x2048xf32>) -> tensor<256x2048xf32>
    %2 = linalg.matmul {slicer.dist = ["[[],[]] partial=[y]"]} ins(%arg0, %arg1 : tensor<256x256xf32>, tensor<256x2048xf32>) outs(%1 : tensor<256x2048xf32>) -> tensor<256x2048xf32>
    %3 = shard.all_reduce %2 on @mesh grid_axes = [0] {slicer.dist = ["[[],[]]"]} : tensor<256x2048xf32> -> tensor<256x2048xf32>
    return %3 : tensor<256x2048xf32>
  }
}
