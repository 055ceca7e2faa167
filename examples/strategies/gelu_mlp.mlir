// A 2-layer MLP with a bias and tanh-gelu, gelu(x @ w1 + b1) @ w2 (GPT-2's MLP), as one global
// linalg-on-tensors program. x: [batch=8, model=16], w1: [16, hidden=32], b1: [32], w2: [32, 16].
// The strategies of docs/tactics.md apply to it by argument position: x = arg0, w1 = arg1, b1 = arg2,
// w2 = arg3 (see README.md in this folder for the table of strategies and their collectives).
func.func @gelu_mlp(%x: tensor<8x16xf32>, %w1: tensor<16x32xf32>, %b1: tensor<32xf32>,
                    %w2: tensor<32x16xf32>) -> tensor<8x16xf32> {
  %zero = arith.constant 0.0 : f32
  %half = arith.constant 0.5 : f32
  %one = arith.constant 1.0 : f32
  %c = arith.constant 0.7978845608 : f32
  %k = arith.constant 0.044715 : f32
  %e1 = tensor.empty() : tensor<8x32xf32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<8x32xf32>) -> tensor<8x32xf32>
  %h = linalg.matmul ins(%x, %w1 : tensor<8x16xf32>, tensor<16x32xf32>)
                     outs(%f1 : tensor<8x32xf32>) -> tensor<8x32xf32>
  // bias + tanh-gelu: 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3)))
  %a = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (j)>,
                                        affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%h, %b1 : tensor<8x32xf32>, tensor<32xf32>) outs(%e1 : tensor<8x32xf32>) {
  ^bb0(%hv: f32, %bv: f32, %o: f32):
    %v = arith.addf %hv, %bv : f32
    %v2 = arith.mulf %v, %v : f32
    %v3 = arith.mulf %v2, %v : f32
    %kv3 = arith.mulf %k, %v3 : f32
    %inner = arith.addf %v, %kv3 : f32
    %scaled = arith.mulf %c, %inner : f32
    %t = math.tanh %scaled : f32
    %onet = arith.addf %one, %t : f32
    %hv2 = arith.mulf %half, %v : f32
    %g = arith.mulf %hv2, %onet : f32
    linalg.yield %g : f32
  } -> tensor<8x32xf32>
  %e2 = tensor.empty() : tensor<8x16xf32>
  %f2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<8x16xf32>) -> tensor<8x16xf32>
  %y = linalg.matmul ins(%a, %w2 : tensor<8x32xf32>, tensor<32x16xf32>)
                     outs(%f2 : tensor<8x16xf32>) -> tensor<8x16xf32>
  return %y : tensor<8x16xf32>
}
