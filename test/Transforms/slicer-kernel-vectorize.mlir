// RUN: slicer-opt %s -p 'slicer-kernel-vectorize{parallel=16 matmul=4,16,8 kc=16}' | FileCheck %s
// RUN: not slicer-opt %s -p 'slicer-kernel-vectorize{matmul=4,16}' 2>&1 | FileCheck %s --check-prefix=COUNT
// RUN: not slicer-opt %s -p 'slicer-kernel-vectorize{tiles=4}' 2>&1 | FileCheck %s --check-prefix=UNKNOWN

// Every linalg.generic is tiled and vectorized by a transform script generated from its iterator types
// (lowering/vectorize.py); named ops such as linalg.fill are left as they are.

// COUNT: slicer-opt: error: pass 'slicer-kernel-vectorize' option 'matmul' takes 3 comma-separated values, got '4,16'
// UNKNOWN: slicer-opt: error: pass 'slicer-kernel-vectorize' has no option 'tiles' (options: parallel, matmul, kc, transpose)

// A contraction, tiled twice: columns by matmul[1] = 16 and the reduction by kc = 16, then rows by
// matmul[0] = 4 and the reduction by matmul[2] = 8; the 4x8 and 8x16 tiles become outer products (vector.fma).
// CHECK-LABEL: func.func @matmul
// CHECK: linalg.fill
// CHECK: scf.for %[[J:.*]] = %{{.*}} to %{{.*}} step %[[C16:.*]] {
// CHECK: scf.for %[[KB:.*]] = %{{.*}} to %{{.*}} step %[[C16]] {
// CHECK: scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step %[[C4:.*]] {
// CHECK: scf.for %[[K:.*]] = %{{.*}} to %{{.*}} step %[[C8:.*]] {
// CHECK: vector.transfer_read {{.*}} : memref<4x8xf32, {{.*}}>, vector<4x8xf32>
// CHECK: vector.transfer_read {{.*}} : memref<8x16xf32, {{.*}}>, vector<8x16xf32>
// CHECK: vector.fma {{.*}} : vector<16xf32>
// CHECK: vector.transfer_write {{.*}} : vector<4x16xf32>, memref<4x16xf32, {{.*}}>
// CHECK-NOT: linalg.generic

// Elementwise: the innermost loop by `parallel` = 16, every other loop by 1.
// CHECK-LABEL: func.func @add
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK: %[[X:.*]] = vector.transfer_read {{.*}} : memref<1x16xf32, {{.*}}>, vector<1x16xf32>
// CHECK: %[[Y:.*]] = vector.transfer_read {{.*}} : memref<1x16xf32, {{.*}}>, vector<1x16xf32>
// CHECK: %[[SUM:.*]] = arith.addf %[[X]], %[[Y]] : vector<1x16xf32>
// CHECK: vector.transfer_write %[[SUM]]
// CHECK-NOT: linalg.generic

// A transpose (the input read across its rows): square blocks of `transpose` = 16 over the result's innermost
// loop and the loop the input walks along its rows, each read as a 16x16 block and transposed by shuffles.
// CHECK-LABEL: func.func @transpose
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %[[T:.*]] {
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %[[T]] {
// CHECK: vector.transfer_read {{.*}} : memref<16x16xf32, {{.*}}>, vector<16x16xf32>
// CHECK: vector.shuffle
// CHECK: vector.transfer_write {{.*}} : vector<16x16xf32>, memref<16x16xf32, {{.*}}>
// CHECK-NOT: linalg.generic

#id = affine_map<(d0, d1) -> (d0, d1)>
module {
  func.func @matmul(%a: memref<16x32xf32>, %b: memref<32x64xf32>, %c: memref<16x64xf32>) {
    %zero = arith.constant 0.000000e+00 : f32
    linalg.fill ins(%zero : f32) outs(%c : memref<16x64xf32>)
    linalg.generic {indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (k, n)>,
                                     affine_map<(m, n, k) -> (m, n)>],
                    iterator_types = ["parallel", "parallel", "reduction"]}
        ins(%a, %b : memref<16x32xf32>, memref<32x64xf32>) outs(%c : memref<16x64xf32>) {
    ^bb0(%x: f32, %y: f32, %acc: f32):
      %p = arith.mulf %x, %y : f32
      %s = arith.addf %acc, %p : f32
      linalg.yield %s : f32
    }
    return
  }
  func.func @add(%a: memref<4x64xf32>, %b: memref<4x64xf32>, %c: memref<4x64xf32>) {
    linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
        ins(%a, %b : memref<4x64xf32>, memref<4x64xf32>) outs(%c : memref<4x64xf32>) {
    ^bb0(%in: f32, %in_0: f32, %out: f32):
      %s = arith.addf %in, %in_0 : f32
      linalg.yield %s : f32
    }
    return
  }
  func.func @transpose(%a: memref<64x32xf32>, %c: memref<32x64xf32>) {
    linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d1, d0)>, #id], iterator_types = ["parallel", "parallel"]}
        ins(%a : memref<64x32xf32>) outs(%c : memref<32x64xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    }
    return
  }
}
