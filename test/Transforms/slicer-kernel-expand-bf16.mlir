// RUN: slicer-opt %s -p slicer-kernel-expand-bf16 | FileCheck %s
// RUN: slicer-opt %S/Inputs/widen-narrow-floats-f32.mlir -p slicer-kernel-expand-bf16 | FileCheck %s --check-prefix=UNTOUCHED

// Roundings to bf16 become integer vector ops (upstream arith-expand{include-bf16=true}): no kernel calls
// __truncsfbf2, which CPUs without AVX512-BF16 would need (lowering/narrow_floats.py). Modules without a
// rounding to bf16 are left as they are (arith-expand rewrites other ops too).

// UNTOUCHED: linalg.matmul

// CHECK-LABEL: func.func @round
// CHECK-NOT: arith.truncf
// CHECK: arith.bitcast %{{.*}} : vector<16xf32> to vector<16xi32>
// CHECK: arith.shrui
// CHECK: arith.trunci %{{.*}} : vector<16xi32> to vector<16xi16>
// CHECK: arith.bitcast %{{.*}} : vector<16xi16> to vector<16xbf16>
// CHECK-NOT: arith.truncf
func.func @round(%v: vector<16xf32>) -> vector<16xbf16> {
  %r = arith.truncf %v : vector<16xf32> to vector<16xbf16>
  return %r : vector<16xbf16>
}
