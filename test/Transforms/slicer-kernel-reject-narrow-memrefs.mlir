// RUN: slicer-opt %s -p slicer-kernel-reject-narrow-memrefs | FileCheck %s
// RUN: not slicer-opt %S/Inputs/narrow-memref.mlir -p slicer-kernel-reject-narrow-memrefs 2>&1 | FileCheck %s --check-prefix=NARROW

// MLIR 22's LLVM lowering asserts (aborting the process) on sub-byte memref elements: a buffer of i1 left
// after bufferization is an error naming it. Bytes (what slicer-kernel-widen-i1 makes of booleans) pass
// unchanged.

// NARROW: error: slicer pass 'slicer-kernel-reject-narrow-memrefs': buffers of i1 elements (memref<8xi1> at loc("{{.*}}narrow-memref.mlir":2:1)) cannot be lowered: MLIR 22 cannot store sub-byte memref elements

// CHECK-LABEL: func.func @store
// CHECK-SAME: (%[[M:.*]]: memref<8xi8>, %[[I:.*]]: index)
// CHECK: %[[ONE:.*]] = arith.constant 1 : i8
// CHECK: memref.store %[[ONE]], %[[M]][%[[I]]] : memref<8xi8>
func.func @store(%m: memref<8xi8>, %i: index) {
  %t = arith.constant 1 : i8
  memref.store %t, %m[%i] : memref<8xi8>
  return
}
