// A pre-norm transformer block (GPT-2 style), as one global linalg-on-tensors program:
//   h = x + attention(layernorm1(x));   out = h + mlp(layernorm2(h)),   mlp(u) = gelu(u @ w1 + b1) @ w2
// B = 4 sequences, S = 8 tokens, D = 16 model dims, H = 4 heads of E = 4 dims, F = 32 hidden units.
// Arguments by position: x = arg0 [B, S, D]; layernorm 1: g1 = arg1, be1 = arg2 [D]; attention: wq = arg3,
// wk = arg4, wv = arg5 [D, H, E], wo = arg6 [H, E, D]; layernorm 2: g2 = arg7, be2 = arg8 [D];
// MLP: w1 = arg9 [D, F], b1 = arg10 [F], w2 = arg11 [F, D].
// Megatron (heads and hidden units over y, two all_reduces): arg3.1=y;arg4.1=y;arg5.1=y;arg6.0=y;arg9.1=y;
// arg10.0=y;arg11.0=y. Data parallel: arg0.0=x. FSDP: arg0.0=x and every parameter's dim 0 over x.
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
func.func @transformer_block(%x: tensor<4x8x16xf32>, %g1: tensor<16xf32>, %be1: tensor<16xf32>, %wq: tensor<16x4x4xf32>, %wk: tensor<16x4x4xf32>,
                             %wv: tensor<16x4x4xf32>, %wo: tensor<4x4x16xf32>, %g2: tensor<16xf32>, %be2: tensor<16xf32>, %w1: tensor<16x32xf32>,
                             %b1: tensor<32xf32>, %w2: tensor<32x16xf32>) -> tensor<4x8x16xf32> {
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
  // layernorm 1: layer normalization over the model dim (rows are (batch, token))
  %ln1_e1 = tensor.empty() : tensor<4x8xf32>
  %ln1_z1 = linalg.fill ins(%zero : f32) outs(%ln1_e1 : tensor<4x8xf32>) -> tensor<4x8xf32>
  %ln1_sum = linalg.generic {indexing_maps = [#bsd, #bs_], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x : tensor<4x8x16xf32>) outs(%ln1_z1 : tensor<4x8xf32>) {
  ^bb0(%v: f32, %acc: f32):
    %r = arith.addf %acc, %v : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  %ln1_centered = linalg.generic {indexing_maps = [#bsd, #bs_, #bsd], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x, %ln1_sum : tensor<4x8x16xf32>, tensor<4x8xf32>) outs(%e_bsd : tensor<4x8x16xf32>) {
  ^bb0(%v: f32, %s: f32, %o: f32):
    %mean = arith.divf %s, %n : f32
    %c = arith.subf %v, %mean : f32
    linalg.yield %c : f32
  } -> tensor<4x8x16xf32>
  %ln1_squares = linalg.generic {indexing_maps = [#bsd, #bs_], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%ln1_centered : tensor<4x8x16xf32>) outs(%ln1_z1 : tensor<4x8xf32>) {
  ^bb0(%c: f32, %acc: f32):
    %sq = arith.mulf %c, %c : f32
    %r = arith.addf %acc, %sq : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  %ln1 = linalg.generic {indexing_maps = [#bsd, #bs_, #d_, #d_, #bsd], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%ln1_centered, %ln1_squares, %g1, %be1 : tensor<4x8x16xf32>, tensor<4x8xf32>, tensor<16xf32>, tensor<16xf32>) outs(%e_bsd : tensor<4x8x16xf32>) {
  ^bb0(%c: f32, %sq: f32, %g: f32, %b: f32, %o: f32):
    %var = arith.divf %sq, %n : f32
    %ve = arith.addf %var, %eps : f32
    %sd = math.sqrt %ve : f32
    %norm = arith.divf %c, %sd : f32
    %scaled = arith.mulf %norm, %g : f32
    %r = arith.addf %scaled, %b : f32
    linalg.yield %r : f32
  } -> tensor<4x8x16xf32>
  %qh = linalg.generic {indexing_maps = [#p_x, #p_w, #p_o], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%ln1, %wq : tensor<4x8x16xf32>, tensor<16x4x4xf32>) outs(%z_bhse : tensor<4x4x8x4xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x4x8x4xf32>
  %kh = linalg.generic {indexing_maps = [#p_x, #p_w, #p_o], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%ln1, %wk : tensor<4x8x16xf32>, tensor<16x4x4xf32>) outs(%z_bhse : tensor<4x4x8x4xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x4x8x4xf32>
  %vh = linalg.generic {indexing_maps = [#p_x, #p_w, #p_o], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%ln1, %wv : tensor<4x8x16xf32>, tensor<16x4x4xf32>) outs(%z_bhse : tensor<4x4x8x4xf32>) {
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
  %attn = linalg.generic {indexing_maps = [#o_c, #o_w, #o_o], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]}
      ins(%ctx, %wo : tensor<4x4x8x4xf32>, tensor<4x4x16xf32>) outs(%z_bsd : tensor<4x8x16xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x8x16xf32>
  %h = linalg.generic {indexing_maps = [#bsd, #bsd, #bsd], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x, %attn : tensor<4x8x16xf32>, tensor<4x8x16xf32>) outs(%e_bsd : tensor<4x8x16xf32>) {
  ^bb0(%u: f32, %w: f32, %o: f32):
    %r = arith.addf %u, %w : f32
    linalg.yield %r : f32
  } -> tensor<4x8x16xf32>
  // layernorm 2: layer normalization over the model dim (rows are (batch, token))
  %ln2_e1 = tensor.empty() : tensor<4x8xf32>
  %ln2_z1 = linalg.fill ins(%zero : f32) outs(%ln2_e1 : tensor<4x8xf32>) -> tensor<4x8xf32>
  %ln2_sum = linalg.generic {indexing_maps = [#bsd, #bs_], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%h : tensor<4x8x16xf32>) outs(%ln2_z1 : tensor<4x8xf32>) {
  ^bb0(%v: f32, %acc: f32):
    %r = arith.addf %acc, %v : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  %ln2_centered = linalg.generic {indexing_maps = [#bsd, #bs_, #bsd], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%h, %ln2_sum : tensor<4x8x16xf32>, tensor<4x8xf32>) outs(%e_bsd : tensor<4x8x16xf32>) {
  ^bb0(%v: f32, %s: f32, %o: f32):
    %mean = arith.divf %s, %n : f32
    %c = arith.subf %v, %mean : f32
    linalg.yield %c : f32
  } -> tensor<4x8x16xf32>
  %ln2_squares = linalg.generic {indexing_maps = [#bsd, #bs_], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%ln2_centered : tensor<4x8x16xf32>) outs(%ln2_z1 : tensor<4x8xf32>) {
  ^bb0(%c: f32, %acc: f32):
    %sq = arith.mulf %c, %c : f32
    %r = arith.addf %acc, %sq : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  %ln2 = linalg.generic {indexing_maps = [#bsd, #bs_, #d_, #d_, #bsd], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%ln2_centered, %ln2_squares, %g2, %be2 : tensor<4x8x16xf32>, tensor<4x8xf32>, tensor<16xf32>, tensor<16xf32>) outs(%e_bsd : tensor<4x8x16xf32>) {
  ^bb0(%c: f32, %sq: f32, %g: f32, %b: f32, %o: f32):
    %var = arith.divf %sq, %n : f32
    %ve = arith.addf %var, %eps : f32
    %sd = math.sqrt %ve : f32
    %norm = arith.divf %c, %sd : f32
    %scaled = arith.mulf %norm, %g : f32
    %r = arith.addf %scaled, %b : f32
    linalg.yield %r : f32
  } -> tensor<4x8x16xf32>
  // MLP: gelu(x @ w1 + b1) @ w2 on every (batch, token) row
  %e_bsf = tensor.empty() : tensor<4x8x32xf32>
  %z_bsf = linalg.fill ins(%zero : f32) outs(%e_bsf : tensor<4x8x32xf32>) -> tensor<4x8x32xf32>
  %hid = linalg.generic {indexing_maps = [#m_x, #m_w1, #m_h], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%ln2, %w1 : tensor<4x8x16xf32>, tensor<16x32xf32>) outs(%z_bsf : tensor<4x8x32xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x8x32xf32>
  // bias + tanh-gelu: 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3)))
  %act = linalg.generic {indexing_maps = [#bsf, #f_, #bsf], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%hid, %b1 : tensor<4x8x32xf32>, tensor<32xf32>) outs(%e_bsf : tensor<4x8x32xf32>) {
  ^bb0(%hv: f32, %bv: f32, %o: f32):
    %v = arith.addf %hv, %bv : f32
    %v2 = arith.mulf %v, %v : f32
    %v3 = arith.mulf %v2, %v : f32
    %kv3 = arith.mulf %k044, %v3 : f32
    %inner = arith.addf %v, %kv3 : f32
    %scaled = arith.mulf %c079, %inner : f32
    %t = math.tanh %scaled : f32
    %onet = arith.addf %one, %t : f32
    %hv2 = arith.mulf %half, %v : f32
    %g = arith.mulf %hv2, %onet : f32
    linalg.yield %g : f32
  } -> tensor<4x8x32xf32>
  %mlp = linalg.generic {indexing_maps = [#m2_a, #m2_w, #m2_o], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%act, %w2 : tensor<4x8x32xf32>, tensor<32x16xf32>) outs(%z_bsd : tensor<4x8x16xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x8x16xf32>
  %out = linalg.generic {indexing_maps = [#bsd, #bsd, #bsd], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%h, %mlp : tensor<4x8x16xf32>, tensor<4x8x16xf32>) outs(%e_bsd : tensor<4x8x16xf32>) {
  ^bb0(%u: f32, %w: f32, %o: f32):
    %r = arith.addf %u, %w : f32
    linalg.yield %r : f32
  } -> tensor<4x8x16xf32>
  return %out : tensor<4x8x16xf32>
}
