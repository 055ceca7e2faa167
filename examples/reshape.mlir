// Reshapes around a reduction, as one global linalg-on-tensors program (no
// slicer ops): the 16 columns of each row are split into 4 groups of 4
// (expand_shape), each group is summed, and the 8x4 group sums are flattened
// (collapse_shape). Tiling the rows (the major dim of both reshape groups):
//   slicer-opt examples/reshape.mlir -p 'slicer-apply-tactics{mesh=x=2,y=4 tactics=arg0.0=x}'
func.func @group_sums(%a: tensor<8x16xf32>) -> tensor<32xf32> {
  %zero = arith.constant 0.0 : f32
  %g = tensor.expand_shape %a [[0], [1, 2]] output_shape [8, 4, 4] : tensor<8x16xf32> into tensor<8x4x4xf32>
  %e = tensor.empty() : tensor<8x4xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<8x4xf32>) -> tensor<8x4xf32>
  %s = linalg.generic {indexing_maps = [affine_map<(i, j, k) -> (i, j, k)>, affine_map<(i, j, k) -> (i, j)>],
                       iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%g : tensor<8x4x4xf32>) outs(%f : tensor<8x4xf32>) {
  ^bb0(%v: f32, %acc: f32):
    %r = arith.addf %acc, %v : f32
    linalg.yield %r : f32
  } -> tensor<8x4xf32>
  %flat = tensor.collapse_shape %s [[0, 1]] : tensor<8x4xf32> into tensor<32xf32>
  return %flat : tensor<32xf32>
}
