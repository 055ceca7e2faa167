// RUN: slicer-opt %s -p slicer-kernel-clamp-gathers | FileCheck %s

// A gather (a tensor.extract in a linalg.generic body) reads at indices clamped into the tensor's bounds
// (lowering/asserts.py), so an index the program's checks reject reads an element instead of wild memory
// and the kernel finishes to report the failed check. Constant indices are left alone.

// CHECK-LABEL: func.func @lookup
// CHECK-SAME: (%{{.*}}: tensor<6xi64>, %[[TABLE:.*]]: tensor<10x4xf32>)
// CHECK: ^bb0(%[[ID:.*]]: i64, %{{.*}}: f32):
// CHECK: %[[ROW:.*]] = arith.index_cast %[[ID]] : i64 to index
// CHECK: %[[COL:.*]] = linalg.index 1 : index
// CHECK: %[[TWO:.*]] = arith.constant 2 : index
// CHECK: %[[ZERO:.*]] = arith.constant 0 : index
// CHECK: %[[NINE:.*]] = arith.constant 9 : index
// CHECK: %[[ATLEAST:.*]] = arith.maxsi %[[ROW]], %[[ZERO]] : index
// CHECK: %[[CLAMPED:.*]] = arith.minsi %[[ATLEAST]], %[[NINE]] : index
// CHECK: %[[THREE:.*]] = arith.constant 3 : index
// CHECK: %[[COLMIN:.*]] = arith.maxsi %[[COL]], %{{.*}} : index
// CHECK: %[[COLCLAMPED:.*]] = arith.minsi %[[COLMIN]], %[[THREE]] : index
// CHECK: tensor.extract %[[TABLE]][%[[CLAMPED]], %[[COLCLAMPED]]] : tensor<10x4xf32>
// CHECK-NOT: arith.maxsi %[[TWO]]
// CHECK: tensor.extract %[[TABLE]][%[[TWO]], %{{.*}}] : tensor<10x4xf32>
func.func @lookup(%ids: tensor<6xi64>, %table: tensor<10x4xf32>) -> tensor<6x4xf32> {
  %e = tensor.empty() : tensor<6x4xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(s, d) -> (s)>, affine_map<(s, d) -> (s, d)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%ids : tensor<6xi64>) outs(%e : tensor<6x4xf32>) {
  ^bb0(%id: i64, %o: f32):
    %i = arith.index_cast %id : i64 to index
    %d = linalg.index 1 : index
    %c2 = arith.constant 2 : index
    %v = tensor.extract %table[%i, %d] : tensor<10x4xf32>
    %w = tensor.extract %table[%c2, %d] : tensor<10x4xf32>
    %s = arith.addf %v, %w : f32
    linalg.yield %s : f32
  } -> tensor<6x4xf32>
  return %r : tensor<6x4xf32>
}

// A tensor.extract outside a generic body is not a gather: left alone.
// CHECK-LABEL: func.func @scalar
// CHECK-NOT: arith.minsi
// CHECK: tensor.extract %{{.*}}[%{{.*}}] : tensor<10xf32>
func.func @scalar(%t: tensor<10xf32>, %i: index) -> f32 {
  %v = tensor.extract %t[%i] : tensor<10xf32>
  return %v : f32
}
