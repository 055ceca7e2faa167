// Single-head attention, softmax(q @ k^T / sqrt(16)) @ v, as one global
// linalg-on-tensors program (no slicer ops). Query rows are independent (tile
// %q's dim 0); the softmax reduces with a max then a sum:
//   slicer-opt examples/attention.mlir -p 'slicer-apply-tactics{mesh=x=2,y=4 tactics=arg0.0=x}'
func.func @attention(%q: tensor<8x16xf32>, %k: tensor<8x16xf32>, %v: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %zero = arith.constant 0.0 : f32
  %lowest = arith.constant -3.0e+38 : f32
  %scale = arith.constant 0.25 : f32
  %ekt = tensor.empty() : tensor<16x8xf32>
  %kt = linalg.transpose ins(%k : tensor<8x16xf32>) outs(%ekt : tensor<16x8xf32>) permutation = [1, 0]
  %es = tensor.empty() : tensor<8x8xf32>
  %zs = linalg.fill ins(%zero : f32) outs(%es : tensor<8x8xf32>) -> tensor<8x8xf32>
  %s = linalg.matmul ins(%q, %kt : tensor<8x16xf32>, tensor<16x8xf32>) outs(%zs : tensor<8x8xf32>) -> tensor<8x8xf32>
  %e1 = tensor.empty() : tensor<8xf32>
  %m0 = linalg.fill ins(%lowest : f32) outs(%e1 : tensor<8xf32>) -> tensor<8xf32>
  %m = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>], iterator_types = ["parallel", "reduction"]}
      ins(%s : tensor<8x8xf32>) outs(%m0 : tensor<8xf32>) {
  ^bb0(%x: f32, %acc: f32):
    %r = arith.maximumf %acc, %x : f32
    linalg.yield %r : f32
  } -> tensor<8xf32>
  %p = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>, affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]}
      ins(%s, %m : tensor<8x8xf32>, tensor<8xf32>) outs(%es : tensor<8x8xf32>) {
  ^bb0(%x: f32, %mx: f32, %o: f32):
    %d = arith.subf %x, %mx : f32
    %sc = arith.mulf %d, %scale : f32
    %ex = math.exp %sc : f32
    linalg.yield %ex : f32
  } -> tensor<8x8xf32>
  %z1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<8xf32>) -> tensor<8xf32>
  %l = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>], iterator_types = ["parallel", "reduction"]}
      ins(%p : tensor<8x8xf32>) outs(%z1 : tensor<8xf32>) {
  ^bb0(%x: f32, %acc: f32):
    %r = arith.addf %acc, %x : f32
    linalg.yield %r : f32
  } -> tensor<8xf32>
  %w = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>, affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]}
      ins(%p, %l : tensor<8x8xf32>, tensor<8xf32>) outs(%es : tensor<8x8xf32>) {
  ^bb0(%x: f32, %sum: f32, %o: f32):
    %r = arith.divf %x, %sum : f32
    linalg.yield %r : f32
  } -> tensor<8x8xf32>
  %eo = tensor.empty() : tensor<8x16xf32>
  %zo = linalg.fill ins(%zero : f32) outs(%eo : tensor<8x16xf32>) -> tensor<8x16xf32>
  %out = linalg.matmul ins(%w, %v : tensor<8x8xf32>, tensor<8x16xf32>) outs(%zo : tensor<8x16xf32>) -> tensor<8x16xf32>
  return %out : tensor<8x16xf32>
}
