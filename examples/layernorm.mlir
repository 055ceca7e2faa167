// Layer normalization over the last dim, y = (x - mean) / sqrt(var + eps) * gamma + beta,
// as one global linalg-on-tensors program (no slicer ops). Rows are independent
// (data parallel over x); the normalized dim is reduced twice (mean, variance):
//   slicer-opt examples/layernorm.mlir -p 'slicer-apply-tactics{mesh=x=2,y=4 tactics=arg0.0=x}'
func.func @layernorm(%x: tensor<8x16xf32>, %gamma: tensor<16xf32>, %beta: tensor<16xf32>) -> tensor<8x16xf32> {
  %zero = arith.constant 0.0 : f32
  %n = arith.constant 16.0 : f32
  %eps = arith.constant 1.0e-05 : f32
  %e1 = tensor.empty() : tensor<8xf32>
  %z1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<8xf32>) -> tensor<8xf32>
  %sum = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<8x16xf32>) outs(%z1 : tensor<8xf32>) {
  ^bb0(%v: f32, %acc: f32):
    %r = arith.addf %acc, %v : f32
    linalg.yield %r : f32
  } -> tensor<8xf32>
  %e2 = tensor.empty() : tensor<8x16xf32>
  %centered = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>, affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]}
      ins(%x, %sum : tensor<8x16xf32>, tensor<8xf32>) outs(%e2 : tensor<8x16xf32>) {
  ^bb0(%v: f32, %s: f32, %o: f32):
    %mean = arith.divf %s, %n : f32
    %c = arith.subf %v, %mean : f32
    linalg.yield %c : f32
  } -> tensor<8x16xf32>
  %squares = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>], iterator_types = ["parallel", "reduction"]}
      ins(%centered : tensor<8x16xf32>) outs(%z1 : tensor<8xf32>) {
  ^bb0(%c: f32, %acc: f32):
    %sq = arith.mulf %c, %c : f32
    %r = arith.addf %acc, %sq : f32
    linalg.yield %r : f32
  } -> tensor<8xf32>
  %y = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>, affine_map<(i, j) -> (j)>, affine_map<(i, j) -> (j)>, affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]}
      ins(%centered, %squares, %gamma, %beta : tensor<8x16xf32>, tensor<8xf32>, tensor<16xf32>, tensor<16xf32>)
      outs(%e2 : tensor<8x16xf32>) {
  ^bb0(%c: f32, %sq: f32, %g: f32, %b: f32, %o: f32):
    %var = arith.divf %sq, %n : f32
    %ve = arith.addf %var, %eps : f32
    %sd = math.sqrt %ve : f32
    %norm = arith.divf %c, %sd : f32
    %scaled = arith.mulf %norm, %g : f32
    %r = arith.addf %scaled, %b : f32
    linalg.yield %r : f32
  } -> tensor<8x16xf32>
  return %y : tensor<8x16xf32>
}
