// RUN: slicer-opt %s -p 'slicer-kernel-im2col' | FileCheck %s
// RUN: slicer-opt %s -p 'slicer-kernel-im2col,slicer-kernel-contract{mr=4 nv=1 unroll=2}' | FileCheck %s --check-prefix=GEMM

// A bufferized convolution (a contraction whose input is read through `oh * s + kh`) becomes an im2col patch
// copy and a contraction over projections (lowering/contract/im2col.py): the patch laid out [reduction dims in
// the weight's order, the patch side's parallel dims in C's order], loop dims contiguous in every operand
// collapsed, so the packed GEMM generator takes it (M = output channels, N = pixels, K = channels x window).

// CHECK-LABEL: func.func @conv_stride2
// CHECK: %[[PATCH:.*]] = memref.alloc() {alignment = 64 : i64} : memref<16x3x3x2x8x8xf32>
// CHECK: call @[[SCALAR:__slicer_im2col_[0-9]+]](%arg0, %[[PATCH]]) : (memref<2x16x18x18xf32>, memref<16x3x3x2x8x8xf32>) -> ()
// CHECK: %[[P:.*]] = memref.collapse_shape %[[PATCH]] {{\[}}[0, 1, 2], [3], [4, 5]] : memref<16x3x3x2x8x8xf32> into memref<144x2x64xf32>
// CHECK: %[[W:.*]] = memref.collapse_shape %arg1 {{\[}}[0], [1, 2, 3]] : memref<32x16x3x3xf32> into memref<32x144xf32>
// CHECK: %[[Y:.*]] = memref.collapse_shape %arg2 {{\[}}[0], [1], [2, 3]] : memref<2x32x8x8xf32> into memref<2x32x64xf32>
// CHECK: linalg.generic {indexing_maps = [#{{.*}}, #{{.*}}, #{{.*}}], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%[[P]], %[[W]] : memref<144x2x64xf32>, memref<32x144xf32>) outs(%[[Y]] : memref<2x32x64xf32>)

// A 2x2 feature map is narrower than a register tile: C is computed with the output channels innermost into a
// buffer copied into C afterwards, and the batch and both pixel dims collapse into one M dim of 8 rows.
// The patch's innermost dims are the kernel window here (3 columns against 2 output columns): the group with
// the input's widest innermost dim goes last, so the copy reads and writes the longest rows.
// CHECK-LABEL: func.func @conv_2x2
// CHECK: %[[CT:.*]] = memref.alloc() {alignment = 64 : i64} : memref<2x2x2x64xf32>
// CHECK: linalg.generic {{.*}} ins(%arg2 : memref<2x64x2x2xf32>) outs(%[[CT]] : memref<2x2x2x64xf32>)
// CHECK: %[[PATCH2:.*]] = memref.alloc() {alignment = 64 : i64} : memref<2x2x2x64x3x3xf32>
// CHECK: call @[[MASKED:__slicer_im2col_[0-9]+]](%arg0, %[[PATCH2]])
// CHECK: memref.collapse_shape %[[PATCH2]] {{\[}}[0, 1, 2], [3, 4, 5]] : memref<2x2x2x64x3x3xf32> into memref<8x576xf32>
// CHECK: memref.collapse_shape %[[CT]] {{\[}}[0, 1, 2], [3]] : memref<2x2x2x64xf32> into memref<8x64xf32>
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]} ins(%{{.*}}, %{{.*}} : memref<8x576xf32>, memref<64x576xf32>) outs(%{{.*}} : memref<8x64xf32>)
// CHECK: linalg.generic {{.*}} ins(%[[CT]] : memref<2x2x2x64xf32>) outs(%arg2 : memref<2x64x2x2xf32>)
// CHECK-NEXT: ^bb0
// CHECK-NEXT: linalg.yield
// CHECK-NEXT: }
// CHECK-NEXT: return

// A patch over 2 MiB (here 4 x 288 x 576 f32) is built and consumed in chunks of the batch: an scf.for around
// the copy and the contraction on subviews of the input and of C.
// CHECK-LABEL: func.func @conv_chunked
// CHECK: scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK: memref.subview %arg0[%[[I]], 0, 0, 0] [2, 32, 26, 26] [1, 1, 1, 1]
// CHECK: memref.subview %arg2[%[[I]], 0, 0, 0] [2, 32, 24, 24] [1, 1, 1, 1]
// CHECK: %[[PATCH3:.*]] = memref.alloc() {alignment = 64 : i64} : memref<32x3x3x2x24x24xf32>
// CHECK: call @[[VECTOR:__slicer_im2col_[0-9]+]](%{{.*}}, %[[PATCH3]])
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%{{.*}}, %{{.*}} : memref<288x2x576xf32>, memref<32x288xf32>)

// C filled with zeros before the op: the relaid buffer is zero-filled instead of copied from C, and C's fill,
// which the copy out overwrites, is dropped.
// CHECK-LABEL: func.func @conv_2x2_zero
// CHECK-NOT: linalg.fill {{.*}} outs(%arg2
// CHECK: %[[CZ:.*]] = memref.alloc() {alignment = 64 : i64} : memref<2x2x2x64xf32>
// CHECK-NEXT: %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT: linalg.fill ins(%[[ZERO]] : f32) outs(%[[CZ]] : memref<2x2x2x64xf32>)

// The patch copies (slicer.lowering.contract.patch_copy): a strided input element by element; a stride-1 input
// by rows, a row narrower than a vector masked, a wider one in vectors, its tail one more vector overlapping.
// CHECK: func.func private @[[SCALAR]](
// CHECK-NOT: vector.load
// CHECK: memref.load
// CHECK: func.func private @[[MASKED]](
// CHECK: vector.constant_mask [3] : vector<16xi1>
// CHECK: vector.maskedload
// CHECK: vector.maskedstore
// CHECK: func.func private @[[VECTOR]](
// CHECK: vector.load %{{.*}} : memref<2x32x26x26xf32, strided<[21632, 676, 26, 1], offset: ?>>, vector<16xf32>
// CHECK: vector.store
// CHECK: vector.load
// CHECK: vector.store %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %c8] : memref<32x3x3x2x24x24xf32>, vector<16xf32>

// After the rewrite both contractions are packed GEMMs; only the copies stay linalg.
// GEMM-LABEL: func.func @conv_stride2
// GEMM: call @__slicer_contract_
// GEMM-LABEL: func.func @conv_2x2
// GEMM: call @__slicer_contract_

#x = affine_map<(n, f, oh, ow, c, kh, kw) -> (n, c, oh * 2 + kh, ow * 2 + kw)>
#w = affine_map<(n, f, oh, ow, c, kh, kw) -> (f, c, kh, kw)>
#y = affine_map<(n, f, oh, ow, c, kh, kw) -> (n, f, oh, ow)>
module attributes {slicer.target_avx512 = false} {
  func.func @conv_stride2(%x: memref<2x16x18x18xf32>, %w: memref<32x16x3x3xf32>, %y: memref<2x32x8x8xf32>) {
    linalg.generic {indexing_maps = [#x, #w, #y], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]}
        ins(%x, %w : memref<2x16x18x18xf32>, memref<32x16x3x3xf32>) outs(%y : memref<2x32x8x8xf32>) {
    ^bb0(%a: f32, %b: f32, %acc: f32):
      %p = arith.mulf %a, %b : f32
      %s = arith.addf %acc, %p : f32
      linalg.yield %s : f32
    }
    return
  }
  func.func @conv_2x2(%x: memref<2x64x4x4xf32>, %w: memref<64x64x3x3xf32>, %y: memref<2x64x2x2xf32>) {
    linalg.generic {indexing_maps = [affine_map<(n, f, oh, ow, c, kh, kw) -> (n, c, oh + kh, ow + kw)>, #w, #y], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]}
        ins(%x, %w : memref<2x64x4x4xf32>, memref<64x64x3x3xf32>) outs(%y : memref<2x64x2x2xf32>) {
    ^bb0(%a: f32, %b: f32, %acc: f32):
      %p = arith.mulf %a, %b : f32
      %s = arith.addf %acc, %p : f32
      linalg.yield %s : f32
    }
    return
  }
  func.func @conv_chunked(%x: memref<4x32x26x26xf32>, %w: memref<32x32x3x3xf32>, %y: memref<4x32x24x24xf32>) {
    linalg.generic {indexing_maps = [affine_map<(n, f, oh, ow, c, kh, kw) -> (n, c, oh + kh, ow + kw)>, #w, #y], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]}
        ins(%x, %w : memref<4x32x26x26xf32>, memref<32x32x3x3xf32>) outs(%y : memref<4x32x24x24xf32>) {
    ^bb0(%a: f32, %b: f32, %acc: f32):
      %p = arith.mulf %a, %b : f32
      %s = arith.addf %acc, %p : f32
      linalg.yield %s : f32
    }
    return
  }
  func.func @conv_2x2_zero(%x: memref<2x64x4x4xf32>, %w: memref<64x64x3x3xf32>, %y: memref<2x64x2x2xf32>) {
    %z = arith.constant 0.0 : f32
    linalg.fill ins(%z : f32) outs(%y : memref<2x64x2x2xf32>)
    linalg.generic {indexing_maps = [affine_map<(n, f, oh, ow, c, kh, kw) -> (n, c, oh + kh, ow + kw)>, #w, #y], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]}
        ins(%x, %w : memref<2x64x4x4xf32>, memref<64x64x3x3xf32>) outs(%y : memref<2x64x2x2xf32>) {
    ^bb0(%a: f32, %b: f32, %acc: f32):
      %p = arith.mulf %a, %b : f32
      %s = arith.addf %acc, %p : f32
      linalg.yield %s : f32
    }
    return
  }
}
