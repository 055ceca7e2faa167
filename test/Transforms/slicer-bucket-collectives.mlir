// RUN: slicer-opt %s -split-input-file -p 'slicer-bucket-collectives{bucket-bytes=4096}' | FileCheck %s
// A smaller bucket size splits them (members in the order their inputs are computed):
// RUN: slicer-opt %s -split-input-file -p 'slicer-bucket-collectives{bucket-bytes=600}' | FileCheck %s --check-prefix=SMALL

// Three gradients (partial sums over x) all_reduced at the end, as a data-parallel step has them: one bucket,
// placed right after the last gradient is computed, before the update that does not need it; each member
// sliced back out right before its first use.
// CHECK-LABEL: func.func @step
// CHECK: %[[G0:.*]] = linalg.matmul {{.*}} -> tensor<8x16xf32>
// CHECK: %[[G1:.*]] = linalg.generic {indexing_maps = [#map, #map1]
// CHECK: %[[G2:.*]] = linalg.matmul {{.*}} -> tensor<16x4xf32>
// CHECK: %[[E:.*]] = tensor.empty() {slicer.dist = ["{{\[\[}}]] varying=[x]"]} : tensor<208xf32>
// CHECK: %[[C0:.*]] = tensor.collapse_shape %[[G0]] {{\[\[}}0, 1]] {{.*}} : tensor<8x16xf32> into tensor<128xf32>
// CHECK: %[[I0:.*]] = tensor.insert_slice %[[C0]] into %[[E]][0] [128] [1]
// CHECK: %[[I1:.*]] = tensor.insert_slice %[[G1]] into %[[I0]][128] [16] [1]
// CHECK: %[[C2:.*]] = tensor.collapse_shape %[[G2]]
// CHECK: %[[I2:.*]] = tensor.insert_slice %[[C2]] into %[[I1]][144] [64] [1]
// CHECK: %[[R:.*]] = shard.all_reduce %[[I2]] on @mesh grid_axes = [0] {slicer.dist = ["{{\[\[}}]]"]} : tensor<208xf32> -> tensor<208xf32>
// CHECK-NOT: shard.all_reduce
// CHECK: linalg.generic {{.*}} ins(%arg3
// CHECK: %[[S0:.*]] = tensor.extract_slice %[[R]][0] [128] [1]
// CHECK: %[[X0:.*]] = tensor.expand_shape %[[S0]] {{\[\[}}0, 1]] output_shape [8, 16]
// CHECK: tensor.extract_slice %[[R]][128] [16] [1]
// CHECK: tensor.extract_slice %[[R]][144] [64] [1]
// CHECK: return
// With 600 bytes, the first gradient (512 B) and the bias (64 B) share a bucket; the last goes alone:
// SMALL: shard.all_reduce {{.*}} : tensor<144xf32> -> tensor<144xf32>
// SMALL: shard.all_reduce {{.*}} : tensor<16x4xf32> -> tensor<16x4xf32>
module {
  shard.grid @mesh(shape = 2) {slicer.axes = ["x"]}
  func.func @step(%arg0: tensor<4x8xf32> {slicer.dist = "[[x],[]]"}, %arg1: tensor<4x16xf32> {slicer.dist = "[[x],[]]"},
                  %arg2: tensor<4x4xf32> {slicer.dist = "[[x],[]]"}, %arg3: tensor<8xf32> {slicer.dist = "[[]]"})
      -> (tensor<8x16xf32> {slicer.dist = "[[],[]]"}, tensor<16xf32> {slicer.dist = "[[]]"},
          tensor<16x4xf32> {slicer.dist = "[[],[]]"}, tensor<8xf32> {slicer.dist = "[[]]"})
      attributes {slicer.spmd_mesh = "x=2"} {
    %cst = arith.constant 0.000000e+00 : f32
    %e0 = tensor.empty() {slicer.dist = ["[[],[]]"]} : tensor<8x16xf32>
    %f0 = linalg.fill {slicer.dist = ["[[],[]]"]} ins(%cst : f32) outs(%e0 : tensor<8x16xf32>) -> tensor<8x16xf32>
    %t0 = tensor.empty() {slicer.dist = ["[[],[x]]"]} : tensor<8x4xf32>
    %tr = linalg.transpose ins(%arg0 : tensor<4x8xf32>) outs(%t0 : tensor<8x4xf32>) permutation = [1, 0] {slicer.dist = ["[[],[x]]"]}
    %g0 = linalg.matmul {slicer.dist = ["[[],[]] varying=[x]"]} ins(%tr, %arg1 : tensor<8x4xf32>, tensor<4x16xf32>) outs(%f0 : tensor<8x16xf32>) -> tensor<8x16xf32>
    %e1 = tensor.empty() {slicer.dist = ["[[]]"]} : tensor<16xf32>
    %f1 = linalg.fill {slicer.dist = ["[[]]"]} ins(%cst : f32) outs(%e1 : tensor<16xf32>) -> tensor<16xf32>
    %g1 = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (j)>], iterator_types = ["reduction", "parallel"]}
        ins(%arg1 : tensor<4x16xf32>) outs(%f1 : tensor<16xf32>) attrs = {slicer.dist = ["[[]] varying=[x]"]} {
    ^bb0(%a: f32, %acc: f32):
      %s = arith.addf %a, %acc : f32
      linalg.yield %s : f32
    } -> tensor<16xf32>
    %e2 = tensor.empty() {slicer.dist = ["[[],[]]"]} : tensor<16x4xf32>
    %f2 = linalg.fill {slicer.dist = ["[[],[]]"]} ins(%cst : f32) outs(%e2 : tensor<16x4xf32>) -> tensor<16x4xf32>
    %t1 = tensor.empty() {slicer.dist = ["[[],[x]]"]} : tensor<16x4xf32>
    %tr1 = linalg.transpose ins(%arg1 : tensor<4x16xf32>) outs(%t1 : tensor<16x4xf32>) permutation = [1, 0] {slicer.dist = ["[[],[x]]"]}
    %g2 = linalg.matmul {slicer.dist = ["[[],[]] varying=[x]"]} ins(%tr1, %arg2 : tensor<16x4xf32>, tensor<4x4xf32>) outs(%f2 : tensor<16x4xf32>) -> tensor<16x4xf32>
    %e3 = tensor.empty() {slicer.dist = ["[[]]"]} : tensor<8xf32>
    %u = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>], iterator_types = ["parallel"]}
        ins(%arg3 : tensor<8xf32>) outs(%e3 : tensor<8xf32>) attrs = {slicer.dist = ["[[]]"]} {
    ^bb0(%a: f32, %o: f32):
      %m = arith.mulf %a, %a : f32
      linalg.yield %m : f32
    } -> tensor<8xf32>
    %r0 = shard.all_reduce %g0 on @mesh grid_axes = [0] {slicer.dist = ["[[],[]]"]} : tensor<8x16xf32> -> tensor<8x16xf32>
    %r1 = shard.all_reduce %g1 on @mesh grid_axes = [0] {slicer.dist = ["[[]]"]} : tensor<16xf32> -> tensor<16xf32>
    %r2 = shard.all_reduce %g2 on @mesh grid_axes = [0] {slicer.dist = ["[[],[]]"]} : tensor<16x4xf32> -> tensor<16x4xf32>
    return %r0, %r1, %r2, %u : tensor<8x16xf32>, tensor<16xf32>, tensor<16x4xf32>, tensor<8xf32>
  }
}

// -----

// FSDP's gradients: reduce_scatters of dim 0 over x=2. Each member's block is viewed as 2 rows (row i: what
// device i keeps), the members side by side in a [2, 72] bucket, one reduce_scatter to [1, 72], and each
// member's row sliced back and reshaped.
// CHECK-LABEL: func.func @fsdp
// CHECK: %[[E:.*]] = tensor.empty() {slicer.dist = ["{{\[\[}}],[]]"]} : tensor<2x72xf32>
// CHECK: %[[C0:.*]] = tensor.collapse_shape %arg0 {{\[\[}}0, 1]] : tensor<8x16xf32> into tensor<128xf32>
// CHECK: %[[X0:.*]] = tensor.expand_shape %[[C0]] {{\[\[}}0, 1]] output_shape [2, 64] {{.*}} : tensor<128xf32> into tensor<2x64xf32>
// CHECK: %[[I0:.*]] = tensor.insert_slice %[[X0]] into %[[E]][0, 0] [2, 64] [1, 1]
// CHECK: %[[X1:.*]] = tensor.expand_shape %arg1 {{\[\[}}0, 1]] output_shape [2, 8] {{.*}} : tensor<16xf32> into tensor<2x8xf32>
// CHECK: %[[I1:.*]] = tensor.insert_slice %[[X1]] into %[[I0]][0, 64] [2, 8] [1, 1]
// CHECK: %[[R:.*]] = shard.reduce_scatter %[[I1]] on @mesh grid_axes = [0] scatter_axis = 0 {slicer.dist = ["{{\[\[}}x],[]]"]} : tensor<2x72xf32> -> tensor<1x72xf32>
// CHECK: %[[S0:.*]] = tensor.extract_slice %[[R]][0, 0] [1, 64] [1, 1]
// CHECK: %[[F0:.*]] = tensor.collapse_shape %[[S0]] {{\[\[}}0, 1]] : tensor<1x64xf32> into tensor<64xf32>
// CHECK: tensor.expand_shape %[[F0]] {{\[\[}}0, 1]] output_shape [4, 16]
// CHECK: %[[S1:.*]] = tensor.extract_slice %[[R]][0, 64] [1, 8] [1, 1]
// CHECK: tensor.collapse_shape %[[S1]] {{\[\[}}0, 1]] {slicer.dist = ["{{\[\[}}x]]"]} : tensor<1x8xf32> into tensor<8xf32>
module {
  shard.grid @mesh(shape = 2) {slicer.axes = ["x"]}
  func.func @fsdp(%arg0: tensor<8x16xf32> {slicer.dist = "[[],[]]"}, %arg1: tensor<16xf32> {slicer.dist = "[[]]"})
      -> (tensor<4x16xf32> {slicer.dist = "[[x],[]]"}, tensor<8xf32> {slicer.dist = "[[x]]"})
      attributes {slicer.spmd_mesh = "x=2"} {
    %r0 = shard.reduce_scatter %arg0 on @mesh grid_axes = [0] scatter_axis = 0 {slicer.dist = ["[[x],[]]"]} : tensor<8x16xf32> -> tensor<4x16xf32>
    %r1 = shard.reduce_scatter %arg1 on @mesh grid_axes = [0] scatter_axis = 0 {slicer.dist = ["[[x]]"]} : tensor<16xf32> -> tensor<8xf32>
    return %r0, %r1 : tensor<4x16xf32>, tensor<8xf32>
  }
}
