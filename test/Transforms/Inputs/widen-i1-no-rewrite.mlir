// An op on boolean tensors that slicer-kernel-widen-i1 has no byte rewrite for (see slicer-kernel-widen-i1.mlir).
func.func @pad(%m: tensor<8xi1>) -> tensor<9xi1> {
  %p = tensor.pad %m low[1] high[0] {
  ^bb0(%i: index):
    %f = arith.constant false
    tensor.yield %f : i1
  } : tensor<8xi1> to tensor<9xi1>
  return %p : tensor<9xi1>
}
