// RUN: slicer-opt %s -split-input-file -p 'slicer-remat{pattern=blocks.* policy=full}' | FileCheck %s --check-prefix=FULL
// RUN: slicer-opt %s -split-input-file -p 'slicer-remat{pattern=blocks.* policy=save_dots}' | FileCheck %s --check-prefix=DOTS
// RUN: slicer-opt %s -split-input-file -p 'slicer-remat{pattern=blocks.* policy=save_names names=blocks.*.act}' | FileCheck %s --check-prefix=NAMES
// RUN: slicer-opt %s -split-input-file -p 'slicer-remat{pattern=blocks.* policy=none}' | FileCheck %s --check-prefix=NONE

// Two blocks (matmul, tanh, residual add), the loss their output, a backward that reads each block's matmul
// and tanh results. Each block's recomputation is placed right before its own backward (blocks.1 first, then
// blocks.0: not all at once); it reads the block's input and the weights, never the other block's clones; each
// op is cloned once, whatever number of backward readers it has.
// FULL-LABEL: func.func @two_blocks
// FULL:      %[[A0:.*]] = linalg.matmul ins(%arg0, %arg1
// FULL:      %[[T0:.*]] = linalg.generic {{.*}} ins(%[[A0]]
// FULL:      %[[H0:.*]] = linalg.generic {{.*}} ins(%[[T0]], %arg0
// FULL:      %[[A1:.*]] = linalg.matmul ins(%[[H0]], %arg2
// FULL:      %[[T1:.*]] = linalg.generic {{.*}} ins(%[[A1]]
// FULL:      %[[H1:.*]] = linalg.generic {{.*}} ins(%[[T1]], %[[H0]]
// FULL:      %[[RA1:.*]] = linalg.matmul {slicer.remat = "blocks.1"} ins(%[[H0]], %arg2
// FULL:      %[[RT1:.*]] = linalg.generic {{.*}} ins(%[[RA1]] {{.*}}slicer.remat = "blocks.1"}
// FULL:      %[[D1:.*]] = linalg.generic {{.*}} ins(%arg3, %[[RT1]]
// FULL:      %[[D1B:.*]] = linalg.generic {{.*}} ins(%[[D1]], %[[RA1]]
// FULL-NOT:  slicer.remat = "blocks.1"
// FULL:      %[[RA0:.*]] = linalg.matmul {slicer.remat = "blocks.0"} ins(%arg0, %arg1
// FULL:      %[[RT0:.*]] = linalg.generic {{.*}} ins(%[[RA0]] {{.*}}slicer.remat = "blocks.0"}
// FULL:      %[[D0:.*]] = linalg.generic {{.*}} ins(%[[D1B]], %[[RT0]]
// FULL:      %[[D0B:.*]] = linalg.generic {{.*}} ins(%[[D0]], %[[RA0]], %[[RT0]]
// FULL:      return %[[H1]], %[[D1B]], %[[D0B]]
// Contractions saved: only the tanh is recomputed, from the saved matmul result.
// DOTS-LABEL: func.func @two_blocks
// DOTS:      %[[A0:.*]] = linalg.matmul ins(%arg0, %arg1
// DOTS:      %[[A1:.*]] = linalg.matmul
// DOTS-NOT:  linalg.matmul
// DOTS:      %[[RT1:.*]] = linalg.generic {{.*}} ins(%[[A1]] {{.*}}slicer.remat = "blocks.1"}
// DOTS:      %[[RT0:.*]] = linalg.generic {{.*}} ins(%[[A0]] {{.*}}slicer.remat = "blocks.0"}
// DOTS:      ins(%{{.*}}, %[[A0]], %[[RT0]]
// The activations (module `blocks.*.act`) saved: only the matmuls are recomputed, right before their first
// backward reader (after the one reading only the saved activation).
// NAMES-LABEL: func.func @two_blocks
// NAMES:      %[[A1:.*]] = linalg.matmul ins(%{{.*}}, %arg2
// NAMES:      %[[T1:.*]] = linalg.generic {{.*}} ins(%[[A1]]
// NAMES:      linalg.generic {{.*}} ins(%arg3, %[[T1]]
// NAMES:      %[[RA1:.*]] = linalg.matmul {slicer.remat = "blocks.1"}
// NAMES:      %[[RA0:.*]] = linalg.matmul {slicer.remat = "blocks.0"}
// NAMES-NOT:  slicer.remat
// NAMES:      return
// NONE-LABEL: func.func @two_blocks
// NONE-NOT:   slicer.remat
#id = affine_map<(i, j) -> (i, j)>
module {
  func.func @two_blocks(%x: tensor<4x8xf32>, %w0: tensor<8x8xf32>, %w1: tensor<8x8xf32>, %g: tensor<4x8xf32>)
      -> (tensor<4x8xf32> {slicer.name = "loss"}, tensor<4x8xf32>, tensor<4x8xf32>) {
    %cst = arith.constant 0.000000e+00 : f32
    %e = tensor.empty() : tensor<4x8xf32>
    %z = linalg.fill ins(%cst : f32) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>
    %a0 = linalg.matmul ins(%x, %w0 : tensor<4x8xf32>, tensor<8x8xf32>) outs(%z : tensor<4x8xf32>) -> tensor<4x8xf32> loc("module:blocks.0.fc")
    %t0 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%a0 : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
    ^bb0(%a: f32, %o: f32):
      %r = math.tanh %a : f32
      linalg.yield %r : f32
    } -> tensor<4x8xf32> loc("module:blocks.0.act")
    %h0 = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%t0, %x : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %r = arith.addf %a, %b : f32
      linalg.yield %r : f32
    } -> tensor<4x8xf32> loc("module:blocks.0")
    %a1 = linalg.matmul ins(%h0, %w1 : tensor<4x8xf32>, tensor<8x8xf32>) outs(%z : tensor<4x8xf32>) -> tensor<4x8xf32> loc("module:blocks.1.fc")
    %t1 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%a1 : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
    ^bb0(%a: f32, %o: f32):
      %r = math.tanh %a : f32
      linalg.yield %r : f32
    } -> tensor<4x8xf32> loc("module:blocks.1.act")
    %h1 = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%t1, %h0 : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %r = arith.addf %a, %b : f32
      linalg.yield %r : f32
    } -> tensor<4x8xf32> loc("module:blocks.1")
    // the backward: block 1's, then block 0's
    %d1 = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%g, %t1 : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %r = arith.mulf %a, %b : f32
      linalg.yield %r : f32
    } -> tensor<4x8xf32>
    %d1b = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%d1, %a1 : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %r = arith.mulf %a, %b : f32
      linalg.yield %r : f32
    } -> tensor<4x8xf32>
    %d0 = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%d1b, %t0 : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %r = arith.mulf %a, %b : f32
      linalg.yield %r : f32
    } -> tensor<4x8xf32>
    %d0b = linalg.generic {indexing_maps = [#id, #id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%d0, %a0, %t0 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
    ^bb0(%a: f32, %b: f32, %c: f32, %o: f32):
      %m = arith.mulf %a, %b : f32
      %r = arith.mulf %m, %c : f32
      linalg.yield %r : f32
    } -> tensor<4x8xf32>
    return %h1, %d1b, %d0b : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
  }
}

// -----

// A Megatron block: its row-parallel matmul's partial sums all_reduced inside the block. The all_reduce's
// result is saved (the backward reads it): the recomputation starts from it and runs no collective again.
// FULL-LABEL: func.func @megatron_block
// FULL:      %[[R:.*]] = shard.all_reduce
// FULL-NOT:  shard.all_reduce
// FULL:      %[[RT:.*]] = linalg.generic {{.*}} ins(%[[R]] {{.*}}slicer.remat = "blocks.0"}
// FULL:      linalg.generic {{.*}} ins(%arg3, %[[RT]], %[[R]]
// NONE-LABEL: func.func @megatron_block
// NONE-NOT:   slicer.remat
#id = affine_map<(i, j) -> (i, j)>
module {
  shard.grid @mesh(shape = 2) {slicer.axes = ["y"]}
  func.func @megatron_block(%x: tensor<4x8xf32> {slicer.dist = "[[],[y]]"}, %w: tensor<8x8xf32> {slicer.dist = "[[y],[]]"},
                            %unused: tensor<4x8xf32> {slicer.dist = "[[],[]]"}, %g: tensor<4x8xf32> {slicer.dist = "[[],[]]"})
      -> (tensor<4x8xf32> {slicer.name = "loss", slicer.dist = "[[],[]]"}, tensor<4x8xf32> {slicer.dist = "[[],[]]"})
      attributes {slicer.spmd_mesh = "y=2"} {
    %cst = arith.constant 0.000000e+00 : f32
    %e = tensor.empty() {slicer.dist = ["[[],[]]"]} : tensor<4x8xf32>
    %z = linalg.fill {slicer.dist = ["[[],[]]"]} ins(%cst : f32) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>
    %p = linalg.matmul {slicer.dist = ["[[],[]] partial=[y]"]} ins(%x, %w : tensor<4x8xf32>, tensor<8x8xf32>) outs(%z : tensor<4x8xf32>) -> tensor<4x8xf32> loc("module:blocks.0.proj")
    %r = shard.all_reduce %p on @mesh grid_axes = [0] {slicer.dist = ["[[],[]]"]} : tensor<4x8xf32> -> tensor<4x8xf32> loc(fused["module:blocks.0.proj", "module:blocks.0"])
    %t = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%r : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) attrs = {slicer.dist = ["[[],[]]"]} {
    ^bb0(%a: f32, %o: f32):
      %v = math.tanh %a : f32
      linalg.yield %v : f32
    } -> tensor<4x8xf32> loc("module:blocks.0.act")
    %h = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%t : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) attrs = {slicer.dist = ["[[],[]]"]} {
    ^bb0(%a: f32, %o: f32):
      %v = arith.mulf %a, %a : f32
      linalg.yield %v : f32
    } -> tensor<4x8xf32> loc("module:blocks.0")
    %d = linalg.generic {indexing_maps = [#id, #id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%g, %t, %r : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) attrs = {slicer.dist = ["[[],[]]"]} {
    ^bb0(%a: f32, %b: f32, %c: f32, %o: f32):
      %m = arith.mulf %a, %b : f32
      %v = arith.mulf %m, %c : f32
      linalg.yield %v : f32
    } -> tensor<4x8xf32>
    return %h, %d : tensor<4x8xf32>, tensor<4x8xf32>
  }
}
