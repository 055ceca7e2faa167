// A bf16 matmul, tanh and row sum (test/unit/api/test_element_types.py), its contraction split over x.

func.func @f(%x: tensor<8x64xbf16>, %w: tensor<64x32xbf16>) -> (tensor<8x32xbf16>, tensor<8xbf16>) {
  %zero = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<8x32xbf16>
  %f = linalg.fill ins(%zero : bf16) outs(%e : tensor<8x32xbf16>) -> tensor<8x32xbf16>
  %h = linalg.matmul ins(%x, %w : tensor<8x64xbf16>, tensor<64x32xbf16>) outs(%f : tensor<8x32xbf16>) -> tensor<8x32xbf16>
  %g = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%h : tensor<8x32xbf16>) outs(%e : tensor<8x32xbf16>) {
  ^bb0(%v: bf16, %o: bf16):
    %t = math.tanh %v : bf16
    %r = arith.mulf %t, %v : bf16
    linalg.yield %r : bf16
  } -> tensor<8x32xbf16>
  %e2 = tensor.empty() : tensor<8xbf16>
  %f2 = linalg.fill ins(%zero : bf16) outs(%e2 : tensor<8xbf16>) -> tensor<8xbf16>
  %s = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>],
                       iterator_types = ["parallel", "reduction"]}
      ins(%g : tensor<8x32xbf16>) outs(%f2 : tensor<8xbf16>) {
  ^bb0(%v: bf16, %o: bf16):
    %r = arith.addf %v, %o : bf16
    linalg.yield %r : bf16
  } -> tensor<8xbf16>
  return %g, %s : tensor<8x32xbf16>, tensor<8xbf16>
}

