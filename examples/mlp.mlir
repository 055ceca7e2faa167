// A 2-layer MLP, relu(x @ w1 + b1) @ w2, as one global linalg-on-tensors
// program (no slicer ops). Partition it with tactics, e.g. Megatron over `y`:
//   slicer-opt examples/mlp.mlir -p 'slicer-apply-tactics{mesh=x=2,y=4 tactics=arg1.1=y;arg3.0=y}'
// or data parallel over `x`: tactics=arg0.0=x.
func.func @mlp(%x: tensor<8x16xf32>, %w1: tensor<16x32xf32>, %b1: tensor<32xf32>,
               %w2: tensor<32x16xf32>) -> tensor<8x16xf32> {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<8x32xf32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<8x32xf32>) -> tensor<8x32xf32>
  %h = linalg.matmul ins(%x, %w1 : tensor<8x16xf32>, tensor<16x32xf32>)
                     outs(%f1 : tensor<8x32xf32>) -> tensor<8x32xf32>
  // bias add: the bias is broadcast along the rows
  %hb = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (j)>,
                                         affine_map<(i, j) -> (i, j)>],
                        iterator_types = ["parallel", "parallel"]}
      ins(%h, %b1 : tensor<8x32xf32>, tensor<32xf32>) outs(%e1 : tensor<8x32xf32>) {
  ^bb0(%hv: f32, %bv: f32, %o: f32):
    %s = arith.addf %hv, %bv : f32
    linalg.yield %s : f32
  } -> tensor<8x32xf32>
  %a = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%hb : tensor<8x32xf32>) outs(%e1 : tensor<8x32xf32>) {
  ^bb0(%v: f32, %o: f32):
    %r = arith.maximumf %v, %zero : f32
    linalg.yield %r : f32
  } -> tensor<8x32xf32>
  %e2 = tensor.empty() : tensor<8x16xf32>
  %f2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<8x16xf32>) -> tensor<8x16xf32>
  %y = linalg.matmul ins(%a, %w2 : tensor<8x32xf32>, tensor<32x16xf32>)
                     outs(%f2 : tensor<8x16xf32>) -> tensor<8x16xf32>
  return %y : tensor<8x16xf32>
}
