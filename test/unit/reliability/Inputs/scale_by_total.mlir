// A 0-d argument scaling a matrix, and the matrix's full sum as a 0-d result.
func.func @f(%s: tensor<f32>, %b: tensor<4x6xf32>) -> (tensor<f32>, tensor<4x6xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<f32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<f32>) -> tensor<f32>
  %total = linalg.reduce ins(%b : tensor<4x6xf32>) outs(%f : tensor<f32>) dimensions = [0, 1]
    (%in: f32, %acc: f32) {
      %r = arith.addf %in, %acc : f32
      linalg.yield %r : f32
    }
  %e2 = tensor.empty() : tensor<4x6xf32>
  %scaled = linalg.generic {indexing_maps = [affine_map<(i, j) -> ()>, affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
                            iterator_types = ["parallel", "parallel"]} ins(%s, %b : tensor<f32>, tensor<4x6xf32>) outs(%e2 : tensor<4x6xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %z = arith.mulf %x, %y : f32
    linalg.yield %z : f32
  } -> tensor<4x6xf32>
  return %total, %scaled : tensor<f32>, tensor<4x6xf32>
}
