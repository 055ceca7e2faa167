// Row sums, s[i] = sum_j a[i, j], as one global linalg-on-tensors program (no
// slicer ops). Tiling the rows (dim 0) partitions the parallel dim; tiling the
// columns (dim 1) partitions the reduction, whose combiner (arith.addf) is an
// addition, so the partial sums are added up (a `sum` loop):
//   slicer-opt examples/reduction.mlir -p 'slicer-apply-tactics{mesh=x=2,y=4 tactics=arg0.0=x;arg0.1=y}'
func.func @row_sum(%a: tensor<8x16xf32>) -> tensor<8xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<8xf32>) -> tensor<8xf32>
  %s = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>],
                       iterator_types = ["parallel", "reduction"]}
      ins(%a : tensor<8x16xf32>) outs(%f : tensor<8xf32>) {
  ^bb0(%v: f32, %acc: f32):
    %r = arith.addf %acc, %v : f32
    linalg.yield %r : f32
  } -> tensor<8xf32>
  return %s : tensor<8xf32>
}
