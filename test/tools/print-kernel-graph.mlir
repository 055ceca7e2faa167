// The SPMD function cut at its collectives: one kernel, then the all_reduce of the partial sums.
// RUN: slicer-opt %S/../../examples/mlp.mlir -p 'slicer-apply-tactics{mesh=x=2,y=4 tactics=arg0.0=x;arg1.1=y;arg3.0=y},slicer-propagate,slicer-partition' --print-kernel-graph 2>&1 >/dev/null | FileCheck %s
// CHECK: kernel graph of @mlp on mesh x=2,y=4
// CHECK-NEXT: arg %0: f32[4, 16] local of [8, 16] {{\[\[}}x],[]]
// CHECK-NEXT: arg %1: f32[16, 8] local of [16, 32] {{\[\[}}],[y]]
// CHECK-NEXT: arg %2: f32[8] local of [32] {{\[\[}}y]]
// CHECK-NEXT: arg %3: f32[8, 16] local of [32, 16] {{\[\[}}y],[]]
// CHECK-NEXT: kernel kernel_0(%0, %1, %2, %3) -> %4
// CHECK-NEXT: all_reduce %4 -> %5: f32[4, 16] local of [8, 16] {{\[\[}}x],[]]  {'mesh_axes': ['y']}
// CHECK-NEXT: result %5: {{\[\[}}x],[]] (default)
