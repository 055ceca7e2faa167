// RUN: slicer-opt %s -p slicer-kernel-narrow-moves | FileCheck %s

// Vector ops that only move bf16 elements move i16 (lowering/narrow_moves.py): LLVM aborted on the bf16 form of
// @interleave ("Do not know how to soft promote this operator's operand", a scalar_to_vector of bf16): it is
// what the vectorizer makes of the odd-sized bf16 transpose 2x2x2x16x9x9 -> 2x16x9x2x9x2 (an input gradient's
// phases), one row pair of it. Loads and stores keep bf16; a bitcast (exact) is where a moved value meets
// anything else.

// CHECK-LABEL: func.func @interleave
// CHECK: %[[POISON:.*]] = ub.poison : vector<18xi16>
// CHECK: %[[READ:.*]] = vector.transfer_read {{.*}} : memref<2x9xbf16>, vector<2x9xbf16>
// CHECK: %[[BITS:.*]] = arith.bitcast %[[READ]] : vector<2x9xbf16> to vector<2x9xi16>
// CHECK: vector.extract %[[BITS]][0] : vector<9xi16> from vector<2x9xi16>
// CHECK: vector.insert_strided_slice {{.*}} : vector<9xi16> into vector<18xi16>
// CHECK: vector.shuffle {{.*}} : vector<18xi16>, vector<18xi16>
// CHECK: vector.to_elements {{.*}} : vector<2xi16>
// CHECK: %[[ROW:.*]] = vector.from_elements {{.*}} : vector<9x2xi16>
// CHECK: %[[BACK:.*]] = arith.bitcast %[[ROW]] : vector<9x2xi16> to vector<9x2xbf16>
// CHECK: vector.transfer_write %[[BACK]], {{.*}} : vector<9x2xbf16>, memref<9x2xbf16>
// CHECK-NOT: xbf16>, vector<18xbf16>
func.func @interleave(%src: memref<2x9xbf16>, %dst: memref<9x2xbf16>) {
  %c0 = arith.constant 0 : index
  %pad = ub.poison : bf16
  %poison = ub.poison : vector<18xbf16>
  %read = vector.transfer_read %src[%c0, %c0], %pad {in_bounds = [true, true]} : memref<2x9xbf16>, vector<2x9xbf16>
  %r0 = vector.extract %read[0] : vector<9xbf16> from vector<2x9xbf16>
  %a = vector.insert_strided_slice %r0, %poison {offsets = [0], strides = [1]} : vector<9xbf16> into vector<18xbf16>
  %r1 = vector.extract %read[1] : vector<9xbf16> from vector<2x9xbf16>
  %b = vector.insert_strided_slice %r1, %a {offsets = [9], strides = [1]} : vector<9xbf16> into vector<18xbf16>
  %s = vector.shuffle %b, %b [0, 9, 1, 10, 2, 11, 3, 12, 4, 13, 5, 14, 6, 15, 7, 16, 8, 17] : vector<18xbf16>, vector<18xbf16>
  %p0 = vector.extract_strided_slice %s {offsets = [0], sizes = [2], strides = [1]} : vector<18xbf16> to vector<2xbf16>
  %e:2 = vector.to_elements %p0 : vector<2xbf16>
  %row = vector.from_elements %e#0, %e#1, %e#0, %e#1, %e#0, %e#1, %e#0, %e#1, %e#0, %e#1, %e#0, %e#1, %e#0, %e#1, %e#0, %e#1, %e#0, %e#1 : vector<9x2xbf16>
  vector.transfer_write %row, %dst[%c0, %c0] {in_bounds = [true, true]} : vector<9x2xbf16>, memref<9x2xbf16>
  return
}

// A scalar made by arithmetic enters a move as its bits; a moved vector read by arithmetic is bitcast back.
// CHECK-LABEL: func.func @edges
// CHECK: %[[X:.*]] = arith.truncf %{{.*}} : f32 to bf16
// CHECK: %[[XB:.*]] = arith.bitcast %[[X]] : bf16 to i16
// CHECK: %[[SPLAT:.*]] = vector.broadcast %[[XB]] : i16 to vector<16xi16>
// CHECK: %[[V:.*]] = arith.bitcast %[[SPLAT]] : vector<16xi16> to vector<16xbf16>
// CHECK: arith.extf %[[V]] : vector<16xbf16> to vector<16xf32>
func.func @edges(%x: f32) -> vector<16xf32> {
  %n = arith.truncf %x : f32 to bf16
  %v = vector.broadcast %n : bf16 to vector<16xbf16>
  %w = arith.extf %v : vector<16xbf16> to vector<16xf32>
  return %w : vector<16xf32>
}

// f32 moves are left alone.
// CHECK-LABEL: func.func @wide
// CHECK: vector.broadcast %{{.*}} : f32 to vector<16xf32>
// CHECK-NOT: arith.bitcast
func.func @wide(%x: f32) -> vector<16xf32> {
  %v = vector.broadcast %x : f32 to vector<16xf32>
  return %v : vector<16xf32>
}
