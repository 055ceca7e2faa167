// A buffer of i1 elements left after bufferization (see slicer-kernel-reject-narrow-memrefs.mlir).
func.func @store(%m: memref<8xi1>, %i: index) {
  %t = arith.constant true
  memref.store %t, %m[%i] : memref<8xi1>
  return
}
