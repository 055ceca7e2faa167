// Batched multi-head self-attention, as one global linalg-on-tensors program:
//   q, k, v = x @ Wq, x @ Wk, x @ Wv                (per head: [B, H, S, E])
//   p       = softmax(q k^T / sqrt(E))               (max and sum reductions over keys)
//   out     = sum_h (p @ v)_h @ Wo_h                  (the output projection contracts heads)
// B = 4 sequences, S = 8 tokens, D = 16 model dims, H = 4 heads of E = 4 dims. Arguments by position:
// x = arg0 [B, S, D], wq = arg1, wk = arg2, wv = arg3 [D, H, E], wo = arg4 [H, E, D].
// Strategies (README.md in this folder): data parallel arg0.0=x; Megatron (heads over y)
// arg1.1=y;arg2.1=y;arg3.1=y;arg4.0=y; FSDP arg0.0=x;arg1.0=x;arg2.0=x;arg3.0=x;arg4.0=x.
#bsd = affine_map<(b, s, d) -> (b, s, d)>
#bs_ = affine_map<(b, s, d) -> (b, s)>
#d_ = affine_map<(b, s, d) -> (d)>
#p_x = affine_map<(b, h, s, e, d) -> (b, s, d)>
#p_w = affine_map<(b, h, s, e, d) -> (d, h, e)>
#p_o = affine_map<(b, h, s, e, d) -> (b, h, s, e)>
#s_q = affine_map<(b, h, s, t, e) -> (b, h, s, e)>
#s_k = affine_map<(b, h, s, t, e) -> (b, h, t, e)>
#s_o = affine_map<(b, h, s, t, e) -> (b, h, s, t)>
#r4 = affine_map<(b, h, s, t) -> (b, h, s, t)>
#r3 = affine_map<(b, h, s, t) -> (b, h, s)>
#c_p = affine_map<(b, h, s, e, t) -> (b, h, s, t)>
#c_v = affine_map<(b, h, s, e, t) -> (b, h, t, e)>
#c_o = affine_map<(b, h, s, e, t) -> (b, h, s, e)>
#o_c = affine_map<(b, s, d, h, e) -> (b, h, s, e)>
#o_w = affine_map<(b, s, d, h, e) -> (h, e, d)>
#o_o = affine_map<(b, s, d, h, e) -> (b, s, d)>
#m_x = affine_map<(b, s, f, d) -> (b, s, d)>
#m_w1 = affine_map<(b, s, f, d) -> (d, f)>
#m_h = affine_map<(b, s, f, d) -> (b, s, f)>
#bsf = affine_map<(b, s, f) -> (b, s, f)>
#f_ = affine_map<(b, s, f) -> (f)>
#m2_a = affine_map<(b, s, d, f) -> (b, s, f)>
#m2_w = affine_map<(b, s, d, f) -> (f, d)>
#m2_o = affine_map<(b, s, d, f) -> (b, s, d)>
func.func @attention(%x: tensor<4x8x16xf32>, %wq: tensor<16x4x4xf32>, %wk: tensor<16x4x4xf32>, %wv: tensor<16x4x4xf32>,
                     %wo: tensor<4x4x16xf32>) -> tensor<4x8x16xf32> {
  %zero = arith.constant 0.0 : f32
  %lowest = arith.constant -3.0e+38 : f32
  %scale = arith.constant 0.5 : f32
  %n = arith.constant 16.0 : f32
  %eps = arith.constant 1.0e-05 : f32
  %half = arith.constant 0.5 : f32
  %one = arith.constant 1.0 : f32
  %c079 = arith.constant 0.7978845608 : f32
  %k044 = arith.constant 0.044715 : f32
  %e_bsd = tensor.empty() : tensor<4x8x16xf32>
  %z_bsd = linalg.fill ins(%zero : f32) outs(%e_bsd : tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
  %e_bhse = tensor.empty() : tensor<4x4x8x4xf32>
  %z_bhse = linalg.fill ins(%zero : f32) outs(%e_bhse : tensor<4x4x8x4xf32>) -> tensor<4x4x8x4xf32>
  %qh = linalg.generic {indexing_maps = [#p_x, #p_w, #p_o], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %wq : tensor<4x8x16xf32>, tensor<16x4x4xf32>) outs(%z_bhse : tensor<4x4x8x4xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x4x8x4xf32>
  %kh = linalg.generic {indexing_maps = [#p_x, #p_w, #p_o], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %wk : tensor<4x8x16xf32>, tensor<16x4x4xf32>) outs(%z_bhse : tensor<4x4x8x4xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x4x8x4xf32>
  %vh = linalg.generic {indexing_maps = [#p_x, #p_w, #p_o], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %wv : tensor<4x8x16xf32>, tensor<16x4x4xf32>) outs(%z_bhse : tensor<4x4x8x4xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x4x8x4xf32>
  // scores[b, h, s, t] = scale * sum_e q[b, h, s, e] k[b, h, t, e]
  %e_bhst = tensor.empty() : tensor<4x4x8x8xf32>
  %z_bhst = linalg.fill ins(%zero : f32) outs(%e_bhst : tensor<4x4x8x8xf32>) -> tensor<4x4x8x8xf32>
  %scores = linalg.generic {indexing_maps = [#s_q, #s_k, #s_o], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%qh, %kh : tensor<4x4x8x4xf32>, tensor<4x4x8x4xf32>) outs(%z_bhst : tensor<4x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %ms = arith.mulf %m, %scale : f32
    %s = arith.addf %acc, %ms : f32
    linalg.yield %s : f32
  } -> tensor<4x4x8x8xf32>
  // softmax over t: max, exp(x - max), sum, divide
  %e_bhs = tensor.empty() : tensor<4x4x8xf32>
  %low = linalg.fill ins(%lowest : f32) outs(%e_bhs : tensor<4x4x8xf32>) -> tensor<4x4x8xf32>
  %max = linalg.generic {indexing_maps = [#r4, #r3], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%scores : tensor<4x4x8x8xf32>) outs(%low : tensor<4x4x8xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %m = arith.maximumf %acc, %a : f32
    linalg.yield %m : f32
  } -> tensor<4x4x8xf32>
  %ex = linalg.generic {indexing_maps = [#r4, #r3, #r4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%scores, %max : tensor<4x4x8x8xf32>, tensor<4x4x8xf32>) outs(%e_bhst : tensor<4x4x8x8xf32>) {
  ^bb0(%a: f32, %m: f32, %o: f32):
    %d = arith.subf %a, %m : f32
    %e = math.exp %d : f32
    linalg.yield %e : f32
  } -> tensor<4x4x8x8xf32>
  %z_bhs = linalg.fill ins(%zero : f32) outs(%e_bhs : tensor<4x4x8xf32>) -> tensor<4x4x8xf32>
  %den = linalg.generic {indexing_maps = [#r4, #r3], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%ex : tensor<4x4x8x8xf32>) outs(%z_bhs : tensor<4x4x8xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %s = arith.addf %acc, %a : f32
    linalg.yield %s : f32
  } -> tensor<4x4x8xf32>
  %p = linalg.generic {indexing_maps = [#r4, #r3, #r4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%ex, %den : tensor<4x4x8x8xf32>, tensor<4x4x8xf32>) outs(%e_bhst : tensor<4x4x8x8xf32>) {
  ^bb0(%a: f32, %d: f32, %o: f32):
    %r = arith.divf %a, %d : f32
    linalg.yield %r : f32
  } -> tensor<4x4x8x8xf32>
  // ctx[b, h, s, e] = sum_t p[b, h, s, t] v[b, h, t, e]
  %ctx = linalg.generic {indexing_maps = [#c_p, #c_v, #c_o], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%p, %vh : tensor<4x4x8x8xf32>, tensor<4x4x8x4xf32>) outs(%z_bhse : tensor<4x4x8x4xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x4x8x4xf32>
  // out[b, s, d] = sum_(h, e) ctx[b, h, s, e] wo[h, e, d]: the output projection contracts the heads
  %out = linalg.generic {indexing_maps = [#o_c, #o_w, #o_o], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]}
      ins(%ctx, %wo : tensor<4x4x8x4xf32>, tensor<4x4x16xf32>) outs(%z_bsd : tensor<4x8x16xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x8x16xf32>
  return %out : tensor<4x8x16xf32>
}
