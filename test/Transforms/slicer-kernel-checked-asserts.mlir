// RUN: slicer-opt %s -split-input-file -p slicer-kernel-checked-asserts | FileCheck %s
// RUN: slicer-opt %s -split-input-file -p slicer-kernel-checked-asserts | FileCheck %s --check-prefix=NONE

// A failed cf.assert records its number (1-based) in a module global instead of aborting the process
// (lowering/asserts.py); the caller calls @__slicer_failed_assert after the kernel (it returns and resets the
// number) and raises KernelAssertionError with the message, listed on the module by number.

// CHECK: module attributes {slicer.assert_messages = ["index must be smaller than dim size", "index must be larger or equal to 0"]}
// CHECK: memref.global "private" @[[FLAG:__slicer_failed_assert_flag]] : memref<i32> = dense<0>
// CHECK-LABEL: func.func @check
// CHECK-NOT: cf.assert
// CHECK: %[[OK:.*]] = arith.cmpi slt
// CHECK: %[[TRUE:.*]] = arith.constant true
// CHECK: %[[FAILED:.*]] = arith.xori %[[OK]], %[[TRUE]] : i1
// CHECK: scf.if %[[FAILED]] {
// CHECK: %[[ONE:.*]] = arith.constant 1 : i32
// CHECK: %[[G1:.*]] = memref.get_global @[[FLAG]] : memref<i32>
// CHECK: memref.store %[[ONE]], %[[G1]][] : memref<i32>
// CHECK: scf.if
// CHECK: %[[TWO:.*]] = arith.constant 2 : i32
// CHECK: memref.store %[[TWO]]
// CHECK-NOT: cf.assert
// CHECK-LABEL: func.func @__slicer_failed_assert() -> i32
// CHECK: %[[G:.*]] = memref.get_global @[[FLAG]] : memref<i32>
// CHECK: %[[NUMBER:.*]] = memref.load %[[G]][] : memref<i32>
// CHECK: memref.store %{{.*}}, %[[G]][] : memref<i32>
// CHECK: return %[[NUMBER]] : i32
func.func @check(%x: memref<4xi64>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %limit = arith.constant 10 : i64
  %zero = arith.constant 0 : i64
  scf.for %i = %c0 to %c4 step %c1 {
    %v = memref.load %x[%i] : memref<4xi64>
    %small = arith.cmpi slt, %v, %limit : i64
    cf.assert %small, "index must be smaller than dim size"
    %positive = arith.cmpi sge, %v, %zero : i64
    cf.assert %positive, "index must be larger or equal to 0"
  }
  return
}

// -----

// A module without checks is left as it is: no global, no status function, no attribute.
// NONE: // -----
// NONE-NOT: slicer.assert_messages
// NONE-NOT: __slicer_failed_assert
// NONE: func.func @plain
func.func @plain(%x: memref<4xi64>) {
  return
}
