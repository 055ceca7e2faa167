// RUN: slicer-opt %s -p slicer-kernel-fold-widenings | FileCheck %s

// A widening read by several generics (lowering/widenings.py): each reader reads the bf16 tensor and widens it
// in its body (a chain bf16 -> f32 -> f64 as a chain), so the two contractions read bf16 operands (the bf16
// GEMM's form); the widening is gone once nothing else reads it. One also returned stays for its return.

// CHECK-LABEL: func.func @two_projections
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xbf16>, %[[W:.*]]: tensor<8x16xbf16>, %[[V:.*]]: tensor<8x16xbf16>)
// CHECK-NOT: ins(%[[X]] : tensor<4x8xbf16>)
// CHECK: linalg.generic {{.*}} ins(%[[X]], %[[W]] : tensor<4x8xbf16>, tensor<8x16xbf16>)
// CHECK: ^bb0(%[[A:.*]]: bf16, %[[B:.*]]: bf16, %{{.*}}: f32):
// CHECK-NEXT: %[[A32:.*]] = arith.extf %[[A]] : bf16 to f32
// CHECK: arith.mulf %[[A32]], %{{.*}} : f32
// CHECK: linalg.generic {{.*}} ins(%[[X]], %[[V]] : tensor<4x8xbf16>, tensor<8x16xbf16>)
// CHECK: ^bb0(%[[A2:.*]]: bf16, %{{.*}}: bf16, %{{.*}}: f32):
// CHECK-NEXT: arith.extf %[[A2]] : bf16 to f32

// CHECK-LABEL: func.func @chain_and_return
// CHECK-SAME: (%[[Y:.*]]: tensor<4x8xbf16>)
// CHECK: %[[KEPT:.*]] = linalg.generic {{.*}} ins(%[[Y]] : tensor<4x8xbf16>) outs(%{{.*}} : tensor<4x8xf32>)
// CHECK: linalg.generic {{.*}} ins(%[[Y]] : tensor<4x8xbf16>) outs(%{{.*}} : tensor<4xf64>)
// CHECK: ^bb0(%[[E:.*]]: bf16, %{{.*}}: f64):
// CHECK-NEXT: %[[E32:.*]] = arith.extf %[[E]] : bf16 to f32
// CHECK-NEXT: %[[E64:.*]] = arith.extf %[[E32]] : f32 to f64
// CHECK: arith.addf %[[E64]], %{{.*}} : f64
// CHECK: return %[[KEPT]], %{{.*}} : tensor<4x8xf32>, tensor<4xf64>

#id = affine_map<(i, j) -> (i, j)>
#a = affine_map<(i, j, k) -> (i, k)>
#b = affine_map<(i, j, k) -> (k, j)>
#c = affine_map<(i, j, k) -> (i, j)>
#row = affine_map<(i, j) -> (i)>
func.func @two_projections(%x: tensor<4x8xbf16>, %w: tensor<8x16xbf16>, %v: tensor<8x16xbf16>)
    -> (tensor<4x16xf32>, tensor<4x16xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x8xf32>
  %wide = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<4x8xbf16>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %f = arith.extf %in : bf16 to f32
    linalg.yield %f : f32
  } -> tensor<4x8xf32>
  %ec = tensor.empty() : tensor<4x16xf32>
  %fill = linalg.fill ins(%zero : f32) outs(%ec : tensor<4x16xf32>) -> tensor<4x16xf32>
  %p = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%wide, %w : tensor<4x8xf32>, tensor<8x16xbf16>) outs(%fill : tensor<4x16xf32>) {
  ^bb0(%in: f32, %in2: bf16, %out: f32):
    %b = arith.extf %in2 : bf16 to f32
    %m = arith.mulf %in, %b : f32
    %s = arith.addf %out, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x16xf32>
  %q = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%wide, %v : tensor<4x8xf32>, tensor<8x16xbf16>) outs(%fill : tensor<4x16xf32>) {
  ^bb0(%in: f32, %in2: bf16, %out: f32):
    %b = arith.extf %in2 : bf16 to f32
    %m = arith.mulf %in, %b : f32
    %s = arith.addf %out, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x16xf32>
  return %p, %q : tensor<4x16xf32>, tensor<4x16xf32>
}

func.func @chain_and_return(%y: tensor<4x8xbf16>) -> (tensor<4x8xf32>, tensor<4xf64>) {
  %zero = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<4x8xf32>
  %wide = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%y : tensor<4x8xbf16>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %f = arith.extf %in : bf16 to f32
    linalg.yield %f : f32
  } -> tensor<4x8xf32>
  %e64 = tensor.empty() : tensor<4x8xf64>
  %wider = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%wide : tensor<4x8xf32>) outs(%e64 : tensor<4x8xf64>) {
  ^bb0(%in: f32, %out: f64):
    %f = arith.extf %in : f32 to f64
    linalg.yield %f : f64
  } -> tensor<4x8xf64>
  %er = tensor.empty() : tensor<4xf64>
  %fill = linalg.fill ins(%zero : f64) outs(%er : tensor<4xf64>) -> tensor<4xf64>
  %sum = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%wider : tensor<4x8xf64>) outs(%fill : tensor<4xf64>) {
  ^bb0(%in: f64, %out: f64):
    %s = arith.addf %in, %out : f64
    linalg.yield %s : f64
  } -> tensor<4xf64>
  return %wide, %sum : tensor<4x8xf32>, tensor<4xf64>
}
