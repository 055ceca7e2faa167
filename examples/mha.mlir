// Multi-head self-attention block, as one global linalg-on-tensors program:
//   q,k,v = x @ Wq, x @ Wk, x @ Wv          (per head: [H, S, E])
//   p     = softmax(q k^T / sqrt(E))         (max and sum reductions over keys)
//   out   = sum_h (p @ v)_h @ Wo_h           (output projection contracts heads)
// S = 8 tokens, D = 16 model dims, H = 4 heads of E = 4 dims.
// Heads over y: tactics=arg1.1=y;arg2.1=y;arg3.1=y;arg4.0=y (one sum loop at the output
// projection); sequence parallel: tactics=arg0.0=x (K and V are needed whole).
#x_d = affine_map<(h, s, e, d) -> (s, d)>
#w_d = affine_map<(h, s, e, d) -> (d, h, e)>
#hse = affine_map<(h, s, e, d) -> (h, s, e)>
#q3 = affine_map<(h, s, t, e) -> (h, s, e)>
#k3 = affine_map<(h, s, t, e) -> (h, t, e)>
#s3 = affine_map<(h, s, t, e) -> (h, s, t)>
#p3 = affine_map<(h, s, t) -> (h, s, t)>
#r2 = affine_map<(h, s, t) -> (h, s)>
#pv_p = affine_map<(h, s, e, t) -> (h, s, t)>
#pv_v = affine_map<(h, s, e, t) -> (h, t, e)>
#pv_o = affine_map<(h, s, e, t) -> (h, s, e)>
#o_c = affine_map<(s, d, h, e) -> (h, s, e)>
#o_w = affine_map<(s, d, h, e) -> (h, e, d)>
#o_o = affine_map<(s, d, h, e) -> (s, d)>
func.func @mha(%x: tensor<8x16xf32>, %wq: tensor<16x4x4xf32>, %wk: tensor<16x4x4xf32>,
               %wv: tensor<16x4x4xf32>, %wo: tensor<4x4x16xf32>) -> tensor<8x16xf32> {
  %zero = arith.constant 0.0 : f32
  %lowest = arith.constant -3.0e+38 : f32
  %scale = arith.constant 0.5 : f32
  %e_hse = tensor.empty() : tensor<4x8x4xf32>
  %z_hse = linalg.fill ins(%zero : f32) outs(%e_hse : tensor<4x8x4xf32>) -> tensor<4x8x4xf32>
  %q = linalg.generic {indexing_maps = [#x_d, #w_d, #hse], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %wq : tensor<8x16xf32>, tensor<16x4x4xf32>) outs(%z_hse : tensor<4x8x4xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x8x4xf32>
  %k = linalg.generic {indexing_maps = [#x_d, #w_d, #hse], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %wk : tensor<8x16xf32>, tensor<16x4x4xf32>) outs(%z_hse : tensor<4x8x4xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x8x4xf32>
  %v = linalg.generic {indexing_maps = [#x_d, #w_d, #hse], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %wv : tensor<8x16xf32>, tensor<16x4x4xf32>) outs(%z_hse : tensor<4x8x4xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x8x4xf32>
  // scores[h, s, t] = scale * sum_e q[h, s, e] k[h, t, e]
  %e_hst = tensor.empty() : tensor<4x8x8xf32>
  %z_hst = linalg.fill ins(%zero : f32) outs(%e_hst : tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  %scores = linalg.generic {indexing_maps = [#q3, #k3, #s3], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%q, %k : tensor<4x8x4xf32>, tensor<4x8x4xf32>) outs(%z_hst : tensor<4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %ms = arith.mulf %m, %scale : f32
    %s = arith.addf %acc, %ms : f32
    linalg.yield %s : f32
  } -> tensor<4x8x8xf32>
  // softmax over t: max, exp(x - max), sum, divide
  %e_hs = tensor.empty() : tensor<4x8xf32>
  %low = linalg.fill ins(%lowest : f32) outs(%e_hs : tensor<4x8xf32>) -> tensor<4x8xf32>
  %max = linalg.generic {indexing_maps = [#p3, #r2], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%scores : tensor<4x8x8xf32>) outs(%low : tensor<4x8xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %m = arith.maximumf %acc, %a : f32
    linalg.yield %m : f32
  } -> tensor<4x8xf32>
  %ex = linalg.generic {indexing_maps = [#p3, #r2, #p3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%scores, %max : tensor<4x8x8xf32>, tensor<4x8xf32>) outs(%e_hst : tensor<4x8x8xf32>) {
  ^bb0(%a: f32, %m: f32, %o: f32):
    %d = arith.subf %a, %m : f32
    %e = math.exp %d : f32
    linalg.yield %e : f32
  } -> tensor<4x8x8xf32>
  %z_hs = linalg.fill ins(%zero : f32) outs(%e_hs : tensor<4x8xf32>) -> tensor<4x8xf32>
  %den = linalg.generic {indexing_maps = [#p3, #r2], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%ex : tensor<4x8x8xf32>) outs(%z_hs : tensor<4x8xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %s = arith.addf %acc, %a : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  %p = linalg.generic {indexing_maps = [#p3, #r2, #p3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%ex, %den : tensor<4x8x8xf32>, tensor<4x8xf32>) outs(%e_hst : tensor<4x8x8xf32>) {
  ^bb0(%a: f32, %d: f32, %o: f32):
    %r = arith.divf %a, %d : f32
    linalg.yield %r : f32
  } -> tensor<4x8x8xf32>
  // ctx[h, s, e] = sum_t p[h, s, t] v[h, t, e]
  %ctx = linalg.generic {indexing_maps = [#pv_p, #pv_v, #pv_o], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%p, %v : tensor<4x8x8xf32>, tensor<4x8x4xf32>) outs(%z_hse : tensor<4x8x4xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x8x4xf32>
  // out[s, d] = sum_{h, e} ctx[h, s, e] wo[h, e, d]
  %e_sd = tensor.empty() : tensor<8x16xf32>
  %z_sd = linalg.fill ins(%zero : f32) outs(%e_sd : tensor<8x16xf32>) -> tensor<8x16xf32>
  %out = linalg.generic {indexing_maps = [#o_c, #o_w, #o_o], iterator_types = ["parallel", "parallel", "reduction", "reduction"]}
      ins(%ctx, %wo : tensor<4x8x4xf32>, tensor<4x4x16xf32>) outs(%z_sd : tensor<8x16xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<8x16xf32>
  return %out : tensor<8x16xf32>
}
