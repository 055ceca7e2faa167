// The MLP of examples/mlp.mlir with named arguments (as slicer.from_torch names a model's parameters).
func.func @mlp(%x: tensor<8x16xf32> {slicer.name = "x"}, %w1: tensor<16x32xf32> {slicer.name = "fc1.weight"},
               %b1: tensor<32xf32> {slicer.name = "fc1.bias"}, %w2: tensor<32x16xf32> {slicer.name = "fc2.weight"})
    -> tensor<8x16xf32> {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<8x32xf32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<8x32xf32>) -> tensor<8x32xf32>
  %h = linalg.matmul ins(%x, %w1 : tensor<8x16xf32>, tensor<16x32xf32>) outs(%f1 : tensor<8x32xf32>) -> tensor<8x32xf32>
  %e2 = tensor.empty() : tensor<8x16xf32>
  %f2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<8x16xf32>) -> tensor<8x16xf32>
  %o = linalg.matmul ins(%h, %w2 : tensor<8x32xf32>, tensor<32x16xf32>) outs(%f2 : tensor<8x16xf32>) -> tensor<8x16xf32>
  return %o : tensor<8x16xf32>
}
