// RUN: slicer-opt %s -p 'slicer-kernel-contract{mr=4 nv=1 unroll=2}' | FileCheck %s
// RUN: not slicer-opt %s -p 'slicer-kernel-contract{mr=4x}' 2>&1 | FileCheck %s --check-prefix=NOTINT
// RUN: not slicer-opt %s -p 'slicer-kernel-contract{tile=4}' 2>&1 | FileCheck %s --check-prefix=UNKNOWN

// A bufferized contraction (a generic computing out + a * b) becomes a call to a generated packed GEMM
// (lowering/contract.py): B is packed into panels, A into row tiles, and one register-tile micro-kernel
// (mr rows x nv vectors of 16 f32) runs over each pair, its k loop unrolled `unroll` times. The target is
// fixed on the module so the output does not depend on the host's CPU.

// NOTINT: slicer-opt: error: pass 'slicer-kernel-contract' option 'mr' expects an integer, got '4x'
// UNKNOWN: slicer-opt: error: pass 'slicer-kernel-contract' has no option 'tile' (options: mr, nv, mc, nc, kc, unroll, bf16-units)

// CHECK-LABEL: func.func @matmul
// CHECK-SAME: (%[[A:.*]]: memref<16x32xf32>, %[[B:.*]]: memref<32x64xf32>, %[[C:.*]]: memref<16x64xf32>)
// CHECK-NOT: linalg
// CHECK: call @[[GEMM:__slicer_contract_[0-9]+]](%[[A]], %[[B]], %[[C]])
// CHECK-NEXT: return

// The micro-kernel, named by its element type and options: a 4 x 16 tile of C in four vector
// accumulators, each k step one vector of packed B times a broadcast scalar of packed A.
// CHECK: func.func private @[[UKERNEL:__slicer_ukernel_f32_4x1_u2]](
// CHECK: %[[MAIN:.*]]:4 = scf.for %{{.*}} step %c2 iter_args({{.*}}) -> (vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>)
// CHECK: %[[BVEC:.*]] = vector.load %{{.*}} : memref<?xf32>, vector<16xf32>
// CHECK: %[[ASCALAR:.*]] = memref.load %{{.*}} : memref<?xf32>
// CHECK: %[[ABCAST:.*]] = vector.broadcast %[[ASCALAR]] : f32 to vector<16xf32>
// CHECK: vector.fma %[[ABCAST]], %[[BVEC]], %{{.*}} : vector<16xf32>
// The k remainder (k not a multiple of `unroll`), then the tile is stored back into C.
// CHECK: scf.for %{{.*}} step %c1 iter_args
// CHECK-COUNT-4: vector.store %{{.*}}, %{{.*}} : memref<4x16xf32, strided<[?, 1], offset: ?>>, vector<16xf32>

// The GEMM: the packed panels, the packing loops, then the loops over panels and row tiles around the
// micro-kernel.
// CHECK: func.func private @[[GEMM]](
// CHECK: %[[BPACK:.*]] = memref.alloc() {alignment = 64 : i64} : memref<2048xf32>
// CHECK: vector.load %{{.*}} : memref<32x64xf32>, vector<16xf32>
// CHECK: vector.store %{{.*}} : memref<?xf32>, vector<16xf32>
// CHECK: vector.load %{{.*}} : memref<16x32xf32>, vector<16xf32>
// CHECK: scf.for
// CHECK: scf.for
// CHECK: memref.subview %[[C]]
// CHECK: call @[[UKERNEL]](

module attributes {slicer.target_avx512 = false} {
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
}
