// Row-wise softmax over dim 1 (max, exp(x - max), sum, divide) as linalg.generic
// reductions. Rows are independent (tile dim 0); the reduced dim 1 is blocked by the max.
func.func @softmax(%a: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %lowest = arith.constant -3.0e+38 : f32
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<8xf32>
  %m0 = linalg.fill ins(%lowest : f32) outs(%e1 : tensor<8xf32>) -> tensor<8xf32>
  %m = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>],
                       iterator_types = ["parallel", "reduction"]}
      ins(%a : tensor<8x16xf32>) outs(%m0 : tensor<8xf32>) {
  ^bb0(%v: f32, %acc: f32):
    %r = arith.maximumf %acc, %v : f32
    linalg.yield %r : f32
  } -> tensor<8xf32>
  %e2 = tensor.empty() : tensor<8x16xf32>
  %x = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>,
                                        affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%a, %m : tensor<8x16xf32>, tensor<8xf32>) outs(%e2 : tensor<8x16xf32>) {
  ^bb0(%v: f32, %mv: f32, %o: f32):
    %d = arith.subf %v, %mv : f32
    %ex = math.exp %d : f32
    linalg.yield %ex : f32
  } -> tensor<8x16xf32>
  %s0 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<8xf32>) -> tensor<8xf32>
  %s = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>],
                       iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<8x16xf32>) outs(%s0 : tensor<8xf32>) {
  ^bb0(%v: f32, %acc: f32):
    %r = arith.addf %acc, %v : f32
    linalg.yield %r : f32
  } -> tensor<8xf32>
  %y = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>,
                                        affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%x, %s : tensor<8x16xf32>, tensor<8xf32>) outs(%e2 : tensor<8x16xf32>) {
  ^bb0(%v: f32, %sv: f32, %o: f32):
    %q = arith.divf %v, %sv : f32
    linalg.yield %q : f32
  } -> tensor<8x16xf32>
  return %y : tensor<8x16xf32>
}
