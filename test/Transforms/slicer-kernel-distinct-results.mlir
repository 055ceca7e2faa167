// RUN: slicer-opt %s -p slicer-kernel-distinct-results | FileCheck %s

// Every result gets its own buffer (lowering/results.py): a value returned twice, or an argument returned,
// is copied into a fresh tensor, so buffer-results-to-out-params never returns one buffer twice.

// CHECK-LABEL: func.func @twice
// CHECK-SAME: (%[[A:.*]]: tensor<8xf32>)
// CHECK: %[[N:.*]] = arith.negf %[[A]] : tensor<8xf32>
// CHECK: %[[E1:.*]] = tensor.empty() : tensor<8xf32>
// CHECK: %[[COPY:.*]] = linalg.copy {{.*}} ins(%[[N]] : tensor<8xf32>) outs(%[[E1]] : tensor<8xf32>)
// CHECK: %[[E2:.*]] = tensor.empty() : tensor<8xf32>
// CHECK: %[[ACOPY:.*]] = linalg.copy {{.*}} ins(%[[A]] : tensor<8xf32>) outs(%[[E2]] : tensor<8xf32>)
// CHECK: return %[[N]], %[[COPY]], %[[ACOPY]] : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
func.func @twice(%a: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) {
  %n = arith.negf %a : tensor<8xf32>
  return %n, %n, %a : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
}

// Distinct computed results stay as they are.
// CHECK-LABEL: func.func @distinct
// CHECK-NOT: linalg.copy
// CHECK: return
func.func @distinct(%a: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %n = arith.negf %a : tensor<8xf32>
  %m = arith.mulf %a, %a : tensor<8xf32>
  return %n, %m : tensor<8xf32>, tensor<8xf32>
}

// After bufferization (the pipeline runs the step again there): one buffer returned twice, or an argument
// returned, is copied into a fresh allocation. (An undefined slice of a tensor.empty and an op computed into it
// bufferize to one memref.alloc; buffer-results-to-out-params crashed on it.)
// CHECK-LABEL: func.func @one_buffer_twice
// CHECK-SAME: (%[[B:.*]]: memref<1x3xi32>)
// CHECK: %[[A:.*]] = memref.alloc() {{.*}}: memref<1x3xi32>
// CHECK: %[[C1:.*]] = memref.alloc() : memref<1x3xi32>
// CHECK: memref.copy %[[A]], %[[C1]]
// CHECK: %[[C2:.*]] = memref.alloc() : memref<1x3xi32>
// CHECK: memref.copy %[[B]], %[[C2]]
// CHECK: return %[[A]], %[[C1]], %[[C2]] : memref<1x3xi32>, memref<1x3xi32>, memref<1x3xi32>
func.func @one_buffer_twice(%b: memref<1x3xi32>) -> (memref<1x3xi32>, memref<1x3xi32>, memref<1x3xi32>) {
  %a = memref.alloc() {alignment = 64 : i64} : memref<1x3xi32>
  return %a, %a, %b : memref<1x3xi32>, memref<1x3xi32>, memref<1x3xi32>
}
