// RUN: slicer-opt %s -p 'slicer-kernel-rows{unroll=2}' | FileCheck %s
// RUN: not slicer-opt %s -p 'slicer-kernel-rows{unroll=two}' 2>&1 | FileCheck %s --check-prefix=NOTINT
// RUN: not slicer-opt %s -p 'slicer-kernel-rows{tile=2}' 2>&1 | FileCheck %s --check-prefix=UNKNOWN

// Bufferized elementwise ops and reductions become generated vector loops (lowering/rows.py): the lane
// dim (contiguous in every operand) runs on vector<16xf32> (64 bytes), `unroll` vectors per iteration.
// The target is fixed on the module so the output does not depend on the host's CPU.

// NOTINT: slicer-opt: error: pass 'slicer-kernel-rows' option 'unroll' expects an integer, got 'two'
// UNKNOWN: slicer-opt: error: pass 'slicer-kernel-rows' has no option 'tile' (options: unroll)

// A fill and the reduction into the same buffer are fused under one loop over the rows: two vector
// accumulators (unroll=2) run along the row, are added, then reduced horizontally once.
// CHECK-LABEL: func.func @row_sums
// CHECK-SAME: (%[[X:.*]]: memref<4x64xf32>, %[[SUMS:.*]]: memref<4xf32>)
// CHECK-NOT: linalg.generic
// CHECK: call @[[ROWS0:__slicer_rows_[0-9]+]](%{{.*}}, %[[SUMS]], %[[X]])
// CHECK-LABEL: func.func @add
// CHECK-NOT: linalg.generic
// CHECK: call @[[ROWS1:__slicer_rows_[0-9]+]]
// The same add in another function calls the same generated loop: one function per distinct body.
// CHECK-LABEL: func.func @add_again
// CHECK: call @[[ROWS1]]
// CHECK-NOT: func.func private @__slicer_rows_2
// CHECK: func.func private @[[ROWS0]]
// CHECK: scf.for %[[ROW:.*]] = %{{.*}} to %{{.*}} step
// CHECK: %[[ACC:.*]]:2 = scf.for %[[COL:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[A0:.*]] = %{{.*}}, %[[A1:.*]] = %{{.*}}) -> (vector<16xf32>, vector<16xf32>)
// CHECK: %[[V0:.*]] = vector.load %{{.*}}[%[[ROW]], %[[COL]]] : memref<4x64xf32>, vector<16xf32>
// CHECK: arith.addf %[[A0]], %[[V0]] : vector<16xf32>
// CHECK: vector.load %{{.*}} : memref<4x64xf32>, vector<16xf32>
// CHECK: arith.addf %[[A1]], %{{.*}} : vector<16xf32>
// CHECK: scf.yield
// CHECK: %[[BOTH:.*]] = arith.addf %[[ACC]]#0, %[[ACC]]#1 : vector<16xf32>
// CHECK: %[[TOTAL:.*]] = vector.reduction <add>, %[[BOTH]] {{.*}} : vector<16xf32> into f32
// CHECK: memref.store %{{.*}}, %{{.*}}[%[[ROW]]] : memref<4xf32>
// The elementwise add: a row loop around a lane loop of two vectors per step (2 x 16 columns).
// CHECK: func.func private @[[ROWS1]]
// CHECK: scf.for
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c32
// CHECK-COUNT-2: vector.store %{{.*}} : memref<4x64xf32>, vector<16xf32>
// CHECK-NOT: vector.store

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
module attributes {slicer.target_avx512 = false} {
  func.func @row_sums(%x: memref<4x64xf32>, %sums: memref<4xf32>) {
    %zero = arith.constant 0.000000e+00 : f32
    linalg.generic {indexing_maps = [affine_map<(d0) -> ()>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
        ins(%zero : f32) outs(%sums : memref<4xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    }
    linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
        ins(%x : memref<4x64xf32>) outs(%sums : memref<4xf32>) {
    ^bb0(%in: f32, %out: f32):
      %s = arith.addf %out, %in : f32
      linalg.yield %s : f32
    }
    return
  }
  func.func @add(%a: memref<4x64xf32>, %b: memref<4x64xf32>, %c: memref<4x64xf32>) {
    linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
        ins(%a, %b : memref<4x64xf32>, memref<4x64xf32>) outs(%c : memref<4x64xf32>) {
    ^bb0(%in: f32, %in_0: f32, %out: f32):
      %s = arith.addf %in, %in_0 : f32
      linalg.yield %s : f32
    }
    return
  }
  func.func @add_again(%a: memref<4x64xf32>, %b: memref<4x64xf32>, %c: memref<4x64xf32>) {
    linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
        ins(%a, %b : memref<4x64xf32>, memref<4x64xf32>) outs(%c : memref<4x64xf32>) {
    ^bb0(%in: f32, %in_0: f32, %out: f32):
      %s = arith.addf %in, %in_0 : f32
      linalg.yield %s : f32
    }
    return
  }
}
