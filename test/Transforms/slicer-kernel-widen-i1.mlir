// RUN: slicer-opt %s -p slicer-kernel-widen-i1 | FileCheck %s
// RUN: not slicer-opt %S/Inputs/widen-i1-no-rewrite.mlir -p slicer-kernel-widen-i1 2>&1 | FileCheck %s --check-prefix=NOREWRITE

// Boolean tensors become byte tensors before bufferization (lowering/widen_i1.py): arguments and results
// are i8 (numpy booleans are one byte, 0 or 1), a generic yielding i1 extends it, one reading i1 truncates
// it, and a boolean constant becomes bytes.

// NOREWRITE: error: slicer pass 'slicer-kernel-widen-i1': 'tensor.pad' at loc("{{.*}}widen-i1-no-rewrite.mlir":3:8) works on boolean (i1) tensors, which kernels store as bytes (i8); it has no rewrite for that

// CHECK-LABEL: func.func @mask
// CHECK-SAME: (%{{.*}}: tensor<8xf32>, %{{.*}}: tensor<8xf32>, %[[KEEP:.*]]: tensor<8xi8>) -> (tensor<8xi8>, tensor<8xf32>)
// CHECK: %[[EMPTY:.*]] = tensor.empty() : tensor<8xi8>
// CHECK: %[[LESS:.*]] = linalg.generic {{.*}} outs(%[[EMPTY]] : tensor<8xi8>)
// CHECK: ^bb0(%{{.*}}: f32, %{{.*}}: f32, %{{.*}}: i8):
// CHECK: %[[CMP:.*]] = arith.cmpf olt
// CHECK: %[[BYTE:.*]] = arith.extui %[[CMP]] : i1 to i8
// CHECK: linalg.yield %[[BYTE]] : i8
// CHECK: %[[PATTERN:.*]] = arith.constant dense<[1, 0, 0, 1, 1, 0, 0, 1]> : tensor<8xi8>
// CHECK: %[[PICKED:.*]] = linalg.generic {{.*}} ins(%[[KEEP]], %[[PATTERN]], %{{.*}} : tensor<8xi8>, tensor<8xi8>, tensor<8xf32>)
// CHECK: ^bb0(%[[K:.*]]: i8, %[[P:.*]]: i8, %{{.*}}: f32, %{{.*}}: f32):
// CHECK: %[[K1:.*]] = arith.trunci %[[K]] : i8 to i1
// CHECK: %[[P1:.*]] = arith.trunci %[[P]] : i8 to i1
// CHECK: arith.andi %[[K1]], %[[P1]] : i1
// CHECK: return %[[LESS]], %[[PICKED]] : tensor<8xi8>, tensor<8xf32>
// CHECK-NOT: i1>

#map = affine_map<(d0) -> (d0)>
func.func @mask(%a: tensor<8xf32>, %b: tensor<8xf32>, %keep: tensor<8xi1>) -> (tensor<8xi1>, tensor<8xf32>) {
  %e = tensor.empty() : tensor<8xi1>
  %less = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]}
      ins(%a, %b : tensor<8xf32>, tensor<8xf32>) outs(%e : tensor<8xi1>) {
  ^bb0(%x: f32, %y: f32, %o: i1):
    %c = arith.cmpf olt, %x, %y : f32
    linalg.yield %c : i1
  } -> tensor<8xi1>
  %pattern = arith.constant dense<[true, false, false, true, true, false, false, true]> : tensor<8xi1>
  %f = tensor.empty() : tensor<8xf32>
  %picked = linalg.generic {indexing_maps = [#map, #map, #map, #map], iterator_types = ["parallel"]}
      ins(%keep, %pattern, %a : tensor<8xi1>, tensor<8xi1>, tensor<8xf32>) outs(%f : tensor<8xf32>) {
  ^bb0(%k: i1, %p: i1, %x: f32, %o: f32):
    %both = arith.andi %k, %p : i1
    %zero = arith.constant 0.0 : f32
    %r = arith.select %both, %x, %zero : f32
    linalg.yield %r : f32
  } -> tensor<8xf32>
  return %less, %picked : tensor<8xi1>, tensor<8xf32>
}
