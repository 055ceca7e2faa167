// RUN: slicer-opt %s -p 'slicer-kernel-contract{mr=4 nv=1 unroll=2}' | FileCheck %s

// A contraction over a padded dim (a vocabulary split in blocks of 25129 of 50257 rows: the last block has
// one row of padding) reads its operands through a mask of the loop index, `select(k < valid, x, 0)`, once
// kernel fusion has fused the padding's zeroing into it (spmd/padding.py). It stays a packed GEMM: the mask
// is part of each side, computed while packing from the packed element's loop index (packing.py), in
// vectors of consecutive indices along the packing's lane dim.

// CHECK-LABEL: func.func @padded_k
// CHECK-NOT: linalg.generic
// CHECK: call @[[GEMM:__slicer_contract_[0-9]+]](
// CHECK: func.func private @[[GEMM]](
// CHECK: vector.step : vector<16xindex>
// CHECK: arith.cmpi ult, %{{.*}}, %{{.*}} : vector<16xindex>

module attributes {slicer.target_avx512 = false} {
  func.func @padded_k(%a: memref<16x32xf32>, %b: memref<32x64xf32>, %valid: index, %c: memref<16x64xf32>) {
    %zero = arith.constant 0.000000e+00 : f32
    linalg.fill ins(%zero : f32) outs(%c : memref<16x64xf32>)
    linalg.generic {indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (k, n)>,
                                     affine_map<(m, n, k) -> (m, n)>],
                    iterator_types = ["parallel", "parallel", "reduction"]}
        ins(%a, %b : memref<16x32xf32>, memref<32x64xf32>) outs(%c : memref<16x64xf32>) {
    ^bb0(%x: f32, %y: f32, %acc: f32):
      %k = linalg.index 2 : index
      %inside = arith.cmpi ult, %k, %valid : index
      %xm = arith.select %inside, %x, %zero : f32
      %ym = arith.select %inside, %y, %zero : f32
      %p = arith.mulf %xm, %ym : f32
      %s = arith.addf %acc, %p : f32
      linalg.yield %s : f32
    }
    return
  }
}
