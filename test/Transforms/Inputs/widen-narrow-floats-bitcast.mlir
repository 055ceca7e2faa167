#id = affine_map<(i) -> (i)>
func.func @bits(%x: tensor<8xbf16>) -> tensor<8xi16> {
  %e = tensor.empty() : tensor<8xi16>
  %g = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : tensor<8xbf16>) outs(%e : tensor<8xi16>) {
  ^bb0(%v: bf16, %o: i16):
    %b = arith.bitcast %v : bf16 to i16
    linalg.yield %b : i16
  } -> tensor<8xi16>
  return %g : tensor<8xi16>
}
