// RUN: slicer-opt %s -p slicer-kernel-widen-narrow-floats | FileCheck %s
// RUN: slicer-opt %S/Inputs/widen-narrow-floats-f32.mlir -p slicer-kernel-widen-narrow-floats | FileCheck %s --check-prefix=F32
// RUN: slicer-opt %S/Inputs/widen-narrow-floats-bitcast.mlir -p slicer-kernel-widen-narrow-floats | FileCheck %s --check-prefix=BITCAST

// bf16 ops compute in f32 and round each result once (lowering/narrow_floats.py): a matmul reads bf16 and
// accumulates in f32 (its zero fill refilled in f32), an elementwise op widens its inputs on entry, a
// truncf written in the body keeps rounding, and each result is rounded by an elementwise truncf after the op.
// Buffers (arguments, results) keep bf16.

// F32: func.func @f32_only
// F32-NOT: arith.extf
// F32-NOT: arith.truncf
// A bitcast reads the bits of the value rounded back to its narrow type:
// BITCAST: ^bb0(%[[V:.*]]: bf16, %{{.*}}: i16):
// BITCAST: %[[W:.*]] = arith.extf %[[V]] : bf16 to f32
// BITCAST: %[[N:.*]] = arith.truncf %[[W]] : f32 to bf16
// BITCAST: arith.bitcast %[[N]] : bf16 to i16

// CHECK-LABEL: func.func @mlp
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xbf16>, %[[W:.*]]: tensor<8x16xbf16>, %[[S:.*]]: tensor<4x16xf32>) -> tensor<4x16xbf16>
// CHECK-DAG: %[[ZERO:.*]] = arith.constant 0.000000e+00 : bf16
// CHECK-DAG: %[[HALF:.*]] = arith.constant 5.000000e-01 : bf16
// CHECK: %[[Z32:.*]] = arith.extf %[[ZERO]] : bf16 to f32
// CHECK: %[[E32:.*]] = tensor.empty() : tensor<4x16xf32>
// CHECK: %[[FILL:.*]] = linalg.fill ins(%[[Z32]] : f32) outs(%[[E32]] : tensor<4x16xf32>)
// CHECK: %[[MM:.*]] = linalg.generic {{.*}} ins(%[[X]], %[[W]] : tensor<4x8xbf16>, tensor<8x16xbf16>) outs(%[[FILL]] : tensor<4x16xf32>)
// CHECK: ^bb0(%[[A:.*]]: bf16, %[[B:.*]]: bf16, %[[C:.*]]: f32):
// CHECK: %[[A32:.*]] = arith.extf %[[A]] : bf16 to f32
// CHECK: %[[B32:.*]] = arith.extf %[[B]] : bf16 to f32
// CHECK: %[[P:.*]] = arith.mulf %[[A32]], %[[B32]] : f32
// CHECK: %[[SUM:.*]] = arith.addf %[[C]], %[[P]] : f32
// CHECK: linalg.yield %[[SUM]] : f32
// CHECK: } -> tensor<4x16xf32>
// CHECK: %[[H:.*]] = linalg.generic {{.*}} ins(%[[MM]] : tensor<4x16xf32>) outs(%{{.*}} : tensor<4x16xbf16>)
// CHECK: arith.truncf %{{.*}} : f32 to bf16
// CHECK: %[[HALF32:.*]] = arith.extf %[[HALF]] : bf16 to f32
// CHECK: %[[G:.*]] = linalg.generic {{.*}} ins(%[[H]], %[[S]] : tensor<4x16xbf16>, tensor<4x16xf32>) outs(%{{.*}} : tensor<4x16xf32>)
// CHECK: ^bb0(%[[V:.*]]: bf16, %[[SV:.*]]: f32, %{{.*}}: f32):
// CHECK: %[[V32:.*]] = arith.extf %[[V]] : bf16 to f32
// CHECK: %[[T:.*]] = math.tanh %[[V32]] : f32
// CHECK: %[[ROUND:.*]] = arith.truncf %[[SV]] : f32 to bf16
// CHECK: %[[BACK:.*]] = arith.extf %[[ROUND]] : bf16 to f32
// CHECK: %[[M:.*]] = arith.mulf %[[T]], %[[BACK]] : f32
// CHECK: %[[R:.*]] = arith.mulf %[[M]], %[[HALF32]] : f32
// CHECK: linalg.yield %[[R]] : f32
// CHECK: %[[OUT:.*]] = linalg.generic {{.*}} ins(%[[G]] : tensor<4x16xf32>) outs(%{{.*}} : tensor<4x16xbf16>)
// CHECK: arith.truncf %{{.*}} : f32 to bf16
// CHECK: return %[[OUT]] : tensor<4x16xbf16>

#id = affine_map<(i, j) -> (i, j)>
func.func @mlp(%x: tensor<4x8xbf16>, %w: tensor<8x16xbf16>, %s: tensor<4x16xf32>) -> tensor<4x16xbf16> {
  %zero = arith.constant 0.0 : bf16
  %half = arith.constant 0.5 : bf16
  %e = tensor.empty() : tensor<4x16xbf16>
  %f = linalg.fill ins(%zero : bf16) outs(%e : tensor<4x16xbf16>) -> tensor<4x16xbf16>
  %h = linalg.matmul ins(%x, %w : tensor<4x8xbf16>, tensor<8x16xbf16>) outs(%f : tensor<4x16xbf16>) -> tensor<4x16xbf16>
  %g = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%h, %s : tensor<4x16xbf16>, tensor<4x16xf32>) outs(%e : tensor<4x16xbf16>) {
  ^bb0(%v: bf16, %sv: f32, %o: bf16):
    %t = math.tanh %v : bf16
    %round = arith.truncf %sv : f32 to bf16
    %m = arith.mulf %t, %round : bf16
    %r = arith.mulf %m, %half : bf16
    linalg.yield %r : bf16
  } -> tensor<4x16xbf16>
  return %g : tensor<4x16xbf16>
}
