// A transpose followed by a matmul, c = a^T @ b, as one global linalg-on-tensors
// program (no slicer ops). Tiling dim 0 of %a tiles dim 1 of the transpose:
//   slicer-opt examples/transpose.mlir -p 'slicer-apply-tactics{mesh=x=2,y=4 tactics=arg0.0=x}'
func.func @transpose_matmul(%a: tensor<8x16xf32>, %b: tensor<8x4xf32>) -> tensor<16x4xf32> {
  %zero = arith.constant 0.0 : f32
  %et = tensor.empty() : tensor<16x8xf32>
  %t = linalg.transpose ins(%a : tensor<8x16xf32>) outs(%et : tensor<16x8xf32>) permutation = [1, 0]
  %e = tensor.empty() : tensor<16x4xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<16x4xf32>) -> tensor<16x4xf32>
  %c = linalg.matmul ins(%t, %b : tensor<16x8xf32>, tensor<8x4xf32>) outs(%f : tensor<16x4xf32>) -> tensor<16x4xf32>
  return %c : tensor<16x4xf32>
}
