// A batch of matmuls, c[b] = a[b] @ w[b], as one global linalg-on-tensors
// program (no slicer ops). Data parallel: tile the batch dim of both inputs,
//   slicer-opt examples/batch_matmul.mlir -p 'slicer-apply-tactics{mesh=x=2,y=4 tactics=arg0.0=x;arg1.0=x}'
func.func @batch_matmul(%a: tensor<4x8x16xf32>, %w: tensor<4x16x8xf32>) -> tensor<4x8x8xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x8x8xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  %c = linalg.batch_matmul ins(%a, %w : tensor<4x8x16xf32>, tensor<4x16x8xf32>)
                           outs(%f : tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  return %c : tensor<4x8x8xf32>
}
