// RUN: slicer-opt %s -p 'slicer-kernel-onehot' | FileCheck %s
// RUN: slicer-opt %S/Inputs/onehot-bf16.mlir -p 'slicer-kernel-onehot' | FileCheck %s --check-prefix=BF16

// A contraction one of whose factors is a one-hot mask (the embedding's gradient as torch's import fuses it:
// uitofp(idx[b, s] == ids[v] and idx[b, s] != -1) * g[b, s, d]) becomes a call to a generated scatter
// (lowering/onehot.py): loops over the tokens, the token's id read once per token, a scan over the ids, and
// only where the mask holds a loop over the row adding the token's gradient into it.

#mk = affine_map<(v, d, b, s) -> (b, s)>
#mv = affine_map<(v, d, b, s) -> (v)>
#mg = affine_map<(v, d, b, s) -> (b, s, d)>
#mo = affine_map<(v, d, b, s) -> (v, d)>

// A plain matmul is no one-hot: it stays for slicer-kernel-contract.
// CHECK-LABEL: func.func @matmul
// CHECK: linalg.matmul
func.func @matmul(%a: memref<16x32xf32>, %b: memref<32x64xf32>, %c: memref<16x64xf32>) {
  linalg.matmul ins(%a, %b : memref<16x32xf32>, memref<32x64xf32>) outs(%c : memref<16x64xf32>)
  return
}

// CHECK-LABEL: func.func @embedding_grad
// CHECK-SAME: (%[[IDX:.*]]: memref<2x8xi64>, %[[IDS:.*]]: memref<64xi64>, %[[G:.*]]: memref<2x8x32xf32>, %[[OUT:.*]]: memref<64x32xf32>)
// CHECK: linalg.fill
// CHECK-NOT: linalg.generic
// CHECK: call @[[SCATTER:__slicer_onehot_[0-9]+]](%[[IDX]], %[[IDS]], %[[G]], %[[OUT]], %{{.*}}) : (memref<2x8xi64>, memref<64xi64>, memref<2x8x32xf32>, memref<64x32xf32>, i64) -> ()
// CHECK-NEXT: return

// CHECK: func.func private @[[SCATTER]](
// CHECK: scf.for %[[B:.*]] = %c0 to %c2
// CHECK-NEXT: scf.for %[[S:.*]] = %c0 to %c8
// CHECK-NEXT: %[[TOKEN:.*]] = memref.load %{{.*}}[%[[B]], %[[S]]] : memref<2x8xi64>
// CHECK-NEXT: %[[VALID:.*]] = arith.cmpi ne, %[[TOKEN]]
// CHECK-NEXT: scf.for %[[V:.*]] = %c0 to %c64
// CHECK-NEXT: %[[ID:.*]] = memref.load %{{.*}}[%[[V]]] : memref<64xi64>
// CHECK-NEXT: %[[HIT:.*]] = arith.cmpi eq, %[[TOKEN]], %[[ID]]
// CHECK-NEXT: %[[MASK:.*]] = arith.andi %[[HIT]], %[[VALID]]
// CHECK-NEXT: %[[ONE:.*]] = arith.uitofp %[[MASK]]
// CHECK-NEXT: scf.if %[[MASK]] {
// CHECK-NEXT: scf.for %[[D:.*]] = %c0 to %c32
// CHECK-NEXT: %[[ACC:.*]] = memref.load %{{.*}}[%[[V]], %[[D]]] : memref<64x32xf32>
// CHECK-NEXT: %[[X:.*]] = memref.load %{{.*}}[%[[B]], %[[S]], %[[D]]] : memref<2x8x32xf32>
// CHECK-NEXT: %[[TERM:.*]] = arith.mulf %[[ONE]], %[[X]]
// CHECK-NEXT: %[[SUM:.*]] = arith.addf %[[ACC]], %[[TERM]]
// CHECK-NEXT: memref.store %[[SUM]], %{{.*}}[%[[V]], %[[D]]] : memref<64x32xf32>
func.func @embedding_grad(%idx: memref<2x8xi64>, %ids: memref<64xi64>, %g: memref<2x8x32xf32>, %out: memref<64x32xf32>) {
  %c-1 = arith.constant -1 : i64
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%out : memref<64x32xf32>)
  linalg.generic {indexing_maps = [#mk, #mv, #mg, #mo], iterator_types = ["parallel", "parallel", "reduction", "reduction"]}
      ins(%idx, %ids, %g : memref<2x8xi64>, memref<64xi64>, memref<2x8x32xf32>) outs(%out : memref<64x32xf32>) {
  ^bb0(%in: i64, %id: i64, %x: f32, %acc: f32):
    %0 = arith.cmpi ne, %in, %c-1 : i64
    %1 = arith.cmpi eq, %in, %id : i64
    %2 = arith.andi %1, %0 : i1
    %3 = arith.uitofp %2 : i1 to f32
    %4 = arith.mulf %3, %x : f32
    %5 = arith.addf %acc, %4 : f32
    linalg.yield %5 : f32
  }
  return
}

// Under mixed precision the mask is made in bf16 and widened (`extf(uitofp(m) : bf16)`, exact: 0 or 1) and
// the gradient is bf16 widened: a one-hot all the same (it was a GEMM over the whole vocabulary). (Inputs/onehot-bf16.mlir)
// BF16-LABEL: func.func @embedding_grad_bf16
// BF16-NOT: linalg.generic
// BF16: call @__slicer_onehot_
// BF16-NEXT: return
