// A dim rotated by one block of two (torch.cat([x[2:], x[:2]])), then exp: tiled over x, the rotation is one permute.
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @rotation(%arg0: tensor<4x2xf32>) -> tensor<4x2xf32> {
  %late = tensor.extract_slice %arg0[2, 0] [2, 2] [1, 1] : tensor<4x2xf32> to tensor<2x2xf32>
  %early = tensor.extract_slice %arg0[0, 0] [2, 2] [1, 1] : tensor<4x2xf32> to tensor<2x2xf32>
  %rotated = tensor.concat dim(0) %late, %early : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<4x2xf32>
  %empty = tensor.empty() : tensor<4x2xf32>
  %exp = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%rotated : tensor<4x2xf32>) outs(%empty : tensor<4x2xf32>) {
  ^bb0(%in: f32, %out: f32):
    %e = math.exp %in : f32
    linalg.yield %e : f32
  } -> tensor<4x2xf32>
  return %exp : tensor<4x2xf32>
}
