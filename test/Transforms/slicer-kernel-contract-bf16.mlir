// RUN: slicer-opt %s -p 'slicer-kernel-contract' | FileCheck %s
// RUN: slicer-opt %s -p 'slicer-kernel-contract{bf16-units=avx512bf16}' | FileCheck %s --check-prefix=DOT
// RUN: slicer-opt %s -p 'slicer-kernel-contract{bf16-units=f32}' | FileCheck %s --check-prefix=FMA
// RUN: not slicer-opt %s -p 'slicer-kernel-contract{bf16-units=tpu}' 2>&1 | FileCheck %s --check-prefix=BADUNITS
// RUN: slicer-opt %S/Inputs/contract-bf16-rounding.mlir -p 'slicer-kernel-contract{bf16-units=avx512bf16},canonicalize' | FileCheck %s --check-prefix=ROUND

// A matmul of bf16 operands accumulated in f32 (the operands widened by arith.extf, as torch-mlir imports
// it) becomes a call to the bf16 GEMM (lowering/contract/bf16_gemm.py): B packed in pairs along k (VNNI),
// A in rows along k, and a micro-kernel on the units the target has. The module fixes the target (an AMX
// CPU), so the output does not depend on the host's CPU; the option forces the other paths.

// The rounding epilogue (lowering/contract/epilogue.py): the GEMM writes the rounding's bf16 output, transposed
// (its C is [b, s, h, e]), and the f32 C and the rounding op are gone; with K longer than one K block they stay.
// ROUND-LABEL: func.func @context
// ROUND-SAME: (%[[P:.*]]: memref<2x4x32x40xbf16>, %[[V:.*]]: memref<2x4x40x64xbf16>, %[[R:.*]]: memref<2x32x4x64xbf16>)
// ROUND-NOT: xf32>
// ROUND: call @{{__slicer_contract_[0-9]+}}(%[[P]], %[[V]], %[[R]])
// ROUND-NEXT: return
// ROUND-LABEL: func.func @long_k
// ROUND: %[[C:.*]] = memref.alloc() {{.*}} : memref<2x4x32x64xf32>
// ROUND: call @{{__slicer_contract_[0-9]+}}(%{{.*}}, %{{.*}}, %[[C]])
// ROUND: linalg.generic {{.*}} ins(%[[C]] : memref<2x4x32x64xf32>) outs(%{{.*}} : memref<2x32x4x64xbf16>)
// ROUND: arith.truncf
// A bias added before the rounding is added by the GEMM too, to each whole f32 tile before it is rounded: the
// bias is the call's argument after the output, and neither the f32 C nor the op remain.
// ROUND-LABEL: func.func @q_bias
// ROUND-SAME: (%[[X:.*]]: memref<2x32x64xbf16>, %[[W:.*]]: memref<4x16x64xbf16>, %[[B:.*]]: memref<4x16xbf16>, %[[Q:.*]]: memref<2x4x32x16xbf16>)
// ROUND-NOT: xf32>
// ROUND: call @[[QB:__slicer_contract_[0-9]+]](%[[X]], %[[W]], %[[Q]], %[[B]])
// ROUND-NEXT: return
// The frontend's zero fill (a generic of no input yielding 0.0) is a zero fill too: gone, and the rounding fused.
// ROUND-LABEL: func.func @frontend_fill
// ROUND-SAME: (%[[FX:.*]]: memref<48x96xbf16>, %[[FW:.*]]: memref<80x96xbf16>, %[[FR:.*]]: memref<48x80xbf16>)
// ROUND-NOT: linalg.generic
// ROUND: call @{{__slicer_contract_[0-9]+}}(%[[FX]], %[[FW]], %[[FR]])
// ROUND-NEXT: return
// fc1's epilogue (bias, rounded, widened back to f32) in place in its f32 result, and the projection's (bias,
// rounded, the residual added in f32, rounded again): the GEMM does both on each whole f32 tile, the addends
// passed after the output in the order they are added.
// ROUND-LABEL: func.func @fc1_widen
// ROUND-SAME: (%[[X1:.*]]: memref<48x96xbf16>, %[[W1:.*]]: memref<80x96xbf16>, %[[B1:.*]]: memref<80xbf16>, %[[R1:.*]]: memref<48x80xf32>)
// ROUND-NOT: linalg.generic
// ROUND: call @[[FC1:__slicer_contract_[0-9]+]](%[[X1]], %[[W1]], %[[R1]], %[[B1]])
// ROUND-NEXT: return
// ROUND-LABEL: func.func @proj_residual
// ROUND-SAME: (%[[X2:.*]]: memref<48x96xbf16>, %[[W2:.*]]: memref<80x96xbf16>, %[[B2:.*]]: memref<80xbf16>, %[[RES:.*]]: memref<48x80xbf16>, %[[R2:.*]]: memref<48x80xbf16>)
// ROUND-NOT: linalg.generic
// ROUND: call @[[PROJ:__slicer_contract_[0-9]+]](%[[X2]], %[[W2]], %[[R2]], %[[B2]], %[[RES]])
// ROUND-NEXT: return
// An output allocated after the contraction is not the GEMM's to write: C and the rounding stay.
// ROUND-LABEL: func.func @late_output
// ROUND: %[[LC:.*]] = memref.alloc() {{.*}} : memref<48x80xf32>
// ROUND: call @{{__slicer_contract_[0-9]+}}(%{{.*}}, %{{.*}}, %[[LC]])
// ROUND: linalg.generic {{.*}} ins(%[[LC]] : memref<48x80xf32>) outs(%{{.*}} : memref<48x80xbf16>)
// ROUND-LABEL: func.func private @{{__slicer_contract_[0-9]+}}
// ROUND: vector.store %{{.*}}, %{{.*}} : memref<2x32x4x64xbf16>, vector<16xbf16>
// ROUND: func.func private @[[QB]](
// ROUND-SAME: %[[BIAS:[a-z0-9]+]]: memref<4x16xbf16>) {
// ROUND: memref.load %[[BIAS]]
// ROUND-NEXT: arith.extf
// ROUND-NEXT: arith.addf
// ROUND-NEXT: arith.truncf
// ROUND: func.func private @[[FC1]](
// ROUND-SAME: %[[FB:[a-z0-9]+]]: memref<80xbf16>) {
// ROUND: vector.load %[[FB]]
// ROUND-NEXT: arith.extf
// ROUND-NEXT: arith.addf
// ROUND-NEXT: arith.truncf
// ROUND-NEXT: arith.extf
// ROUND: vector.store %{{.*}} : memref<48x80xf32>, vector<16xf32>
// ROUND: func.func private @[[PROJ]](
// ROUND-SAME: %[[PB:[a-z0-9]+]]: memref<80xbf16>, %[[PR:[a-z0-9]+]]: memref<48x80xbf16>) {
// ROUND: vector.load %[[PB]]
// ROUND-NEXT: arith.extf
// ROUND-NEXT: arith.addf
// ROUND-NEXT: arith.truncf
// ROUND-NEXT: arith.extf
// ROUND: vector.load %[[PR]]
// ROUND-NEXT: arith.extf
// ROUND-NEXT: arith.addf
// ROUND-NEXT: arith.truncf
// ROUND: vector.store %{{.*}} : memref<48x80xbf16>, vector<16xbf16>

// BADUNITS: error: slicer-kernel-contract: bf16-units must be one of auto, amx, avx512bf16, f32, got 'tpu'

// The module records that it holds tile code: its loader asks Linux for the AMX tile state first.
// CHECK: module attributes {{{.*}}slicer.uses_amx
// CHECK-LABEL: func.func @matmul
// CHECK-SAME: (%[[A:.*]]: memref<64x96xbf16>, %[[B:.*]]: memref<96x64xbf16>, %[[C:.*]]: memref<64x64xf32>)
// CHECK-NOT: linalg
// CHECK: call @[[GEMM:__slicer_contract_[0-9]+]](%[[A]], %[[B]], %[[C]])
// CHECK-NEXT: return

// The AMX micro-kernel, one per static depth (here K = 96: three 32-deep steps, unrolled): A as 32 rows x 96
// bf16 (rows %lda apart: packed, or A itself), B as 48 rows of 32 columns x 2 (pairs along k); C's four 16x16 f32 tiles loaded once, each step two
// B tiles and two A tiles multiplied into them, C stored once (all in one block: LLVM carries no tile across
// a loop's back edge).
// CHECK: func.func private @[[UK:__slicer_ukernel_bf16_amx_32x32_u4_k96]](%{{.*}}: memref<?xbf16>, %{{.*}}: index, %{{.*}}: index,
// CHECK: memref.reinterpret_cast %{{.*}} strides: [%{{.*}}, 1] : memref<?xbf16> to memref<32x?xbf16, strided<[?, 1], offset: ?>>
// CHECK: memref.reinterpret_cast %{{.*}} : memref<?xbf16> to memref<?x64xbf16, strided<[64, 1], offset: ?>>
// CHECK-NOT: scf.for
// CHECK-COUNT-4: amx.tile_load %{{.*}} : memref<32x32xf32, strided<[?, 1], offset: ?>> into !amx.tile<16x16xf32>
// CHECK: amx.tile_load %{{.*}} : memref<?x64xbf16, strided<[64, 1], offset: ?>> into !amx.tile<16x32xbf16>
// CHECK: amx.tile_load %{{.*}} : memref<?x64xbf16, strided<[64, 1], offset: ?>> into !amx.tile<16x32xbf16>
// CHECK: amx.tile_load %{{.*}} : memref<32x?xbf16, strided<[?, 1], offset: ?>> into !amx.tile<16x32xbf16>
// CHECK: amx.tile_mulf %{{.*}} : !amx.tile<16x32xbf16>, !amx.tile<16x32xbf16>, !amx.tile<16x16xf32>
// CHECK-COUNT-11: amx.tile_mulf
// CHECK-NOT: amx.tile_mulf
// CHECK-COUNT-4: amx.tile_store %{{.*}} : memref<32x32xf32, strided<[?, 1], offset: ?>>, !amx.tile<16x16xf32>
// CHECK-NEXT: return

// The GEMM: B's rows k and k+1 interleaved into pairs by one shuffle per 32 values; A (64 columns of C: too
// few for packing A to pay) read in place, its rows 96 apart; C's 32x32 tiles handed to the micro-kernel as
// views of C.
// CHECK: func.func private @[[GEMM]](
// CHECK: %[[AFLAT:.*]] = memref.reinterpret_cast %{{.*}} to offset: [0], sizes: [6144], strides: [1] : memref<64x96xbf16> to memref<?xbf16>
// CHECK: memref.alloc() {alignment = 64 : i64} : memref<{{[0-9]+}}xbf16>
// CHECK: vector.load %{{.*}} : memref<96x64xbf16>, vector<32xbf16>
// CHECK: vector.shuffle %{{.*}}, %{{.*}} [0, 32, 1, 33, 2, 34
// CHECK: memref.subview %{{.*}} : memref<64x64xf32> to memref<32x32xf32, strided<[64, 1], offset: ?>>
// CHECK: call @[[UK]](%[[AFLAT]], %{{.*}}, %c96,

// The AVX512-BF16 micro-kernel: 8 x 2 f32 accumulators, each k pair a vdpbf16ps of a broadcast pair of A.
// DOT-NOT: slicer.uses_amx
// DOT: func.func private @__slicer_ukernel_bf16_avx512bf16_8x32_u4(
// DOT: vector.broadcast %{{.*}} : i32 to vector<16xi32>
// DOT: x86vector.avx512.dot %{{.*}} : vector<32xbf16> -> vector<16xf32>
// DOT-NOT: amx.

// The f32 micro-kernel: the pairs widened to f32 (a shift, a mask) and multiplied by FMAs.
// FMA: func.func private @__slicer_ukernel_bf16_f32_8x32_u4(
// FMA: arith.shli %{{.*}} : vector<16xi32>
// FMA: arith.andi %{{.*}} : vector<16xi32>
// FMA: vector.fma %{{.*}} : vector<16xf32>
// FMA-NOT: x86vector

module attributes {slicer.target_avx512 = true, slicer.target_bf16_units = "amx"} {
  func.func @matmul(%a: memref<64x96xbf16>, %b: memref<96x64xbf16>, %c: memref<64x64xf32>) {
    %zero = arith.constant 0.000000e+00 : f32
    linalg.fill ins(%zero : f32) outs(%c : memref<64x64xf32>)
    linalg.generic {indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (k, n)>,
                                     affine_map<(m, n, k) -> (m, n)>],
                    iterator_types = ["parallel", "parallel", "reduction"]}
        ins(%a, %b : memref<64x96xbf16>, memref<96x64xbf16>) outs(%c : memref<64x64xf32>) {
    ^bb0(%x: bf16, %y: bf16, %acc: f32):
      %xf = arith.extf %x : bf16 to f32
      %yf = arith.extf %y : bf16 to f32
      %p = arith.mulf %xf, %yf : f32
      %s = arith.addf %acc, %p : f32
      linalg.yield %s : f32
    }
    return
  }
}
