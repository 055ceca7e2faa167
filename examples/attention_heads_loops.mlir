// Multi-head attention with the heads partitioned over mesh axis `y` (Megatron
// style): one `sum` loop over `y` whose body computes a block of heads end to
// end -- q/k/v projections (wq, wk, wv sliced by heads), scores, softmax,
// context -- and that block's share of the output projection (wo sliced by
// heads). Nothing needs communication until the output projection, whose
// partial sums over the heads are added by one all_reduce.
//   x: [S=8, D=16], wq/wk/wv: [H=4, D=16, E=8], wo: [H=4, E=8, D=16]
"slicer.mesh"() {sym_name = "mesh", axes = ["y"], shape = array<i64: 2>} : () -> ()

#x_sd = affine_map<(h, s, e, d) -> (s, d)>
#w_hde = affine_map<(h, s, e, d) -> (h, d, e)>
#o_hse = affine_map<(h, s, e, d) -> (h, s, e)>
#q_hse = affine_map<(h, s, t, e) -> (h, s, e)>
#k_hte = affine_map<(h, s, t, e) -> (h, t, e)>
#s_hst = affine_map<(h, s, t, e) -> (h, s, t)>
#id3 = affine_map<(h, s, t) -> (h, s, t)>
#row3 = affine_map<(h, s, t) -> (h, s)>
#p_hst = affine_map<(h, s, e, t) -> (h, s, t)>
#v_hte = affine_map<(h, s, e, t) -> (h, t, e)>
#c_hse = affine_map<(h, s, e, t) -> (h, s, e)>
#ctx = affine_map<(s, o, h, e) -> (h, s, e)>
#wo = affine_map<(s, o, h, e) -> (h, e, o)>
#out = affine_map<(s, o, h, e) -> (s, o)>

func.func @attention(%x: tensor<8x16xf32>, %wq: tensor<4x16x8xf32>, %wk: tensor<4x16x8xf32>,
                     %wv: tensor<4x16x8xf32>, %wo: tensor<4x8x16xf32>) -> tensor<8x16xf32> {
  %out = "slicer.loop"() ({
  ^bb0(%rg: !slicer.range<"y", 2>):
    %wqb = "slicer.slice"(%wq, %rg) {dim = 0 : i64} : (tensor<4x16x8xf32>, !slicer.range<"y", 2>) -> tensor<2x16x8xf32>
    %wkb = "slicer.slice"(%wk, %rg) {dim = 0 : i64} : (tensor<4x16x8xf32>, !slicer.range<"y", 2>) -> tensor<2x16x8xf32>
    %wvb = "slicer.slice"(%wv, %rg) {dim = 0 : i64} : (tensor<4x16x8xf32>, !slicer.range<"y", 2>) -> tensor<2x16x8xf32>
    %wob = "slicer.slice"(%wo, %rg) {dim = 0 : i64} : (tensor<4x8x16xf32>, !slicer.range<"y", 2>) -> tensor<2x8x16xf32>
    %zero = arith.constant 0.0 : f32
    %lowest = arith.constant -3.0e+38 : f32
    %scale = arith.constant 0.35355339 : f32
    %ep = tensor.empty() : tensor<2x8x8xf32>
    %zp = linalg.fill ins(%zero : f32) outs(%ep : tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
    %q = linalg.generic {indexing_maps = [#x_sd, #w_hde, #o_hse], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
        ins(%x, %wqb : tensor<8x16xf32>, tensor<2x16x8xf32>) outs(%zp : tensor<2x8x8xf32>) {
    ^bb0(%a: f32, %b: f32, %c: f32):
      %m = arith.mulf %a, %b : f32
      %s = arith.addf %c, %m : f32
      linalg.yield %s : f32
    } -> tensor<2x8x8xf32>
    %k = linalg.generic {indexing_maps = [#x_sd, #w_hde, #o_hse], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
        ins(%x, %wkb : tensor<8x16xf32>, tensor<2x16x8xf32>) outs(%zp : tensor<2x8x8xf32>) {
    ^bb0(%a: f32, %b: f32, %c: f32):
      %m = arith.mulf %a, %b : f32
      %s = arith.addf %c, %m : f32
      linalg.yield %s : f32
    } -> tensor<2x8x8xf32>
    %v = linalg.generic {indexing_maps = [#x_sd, #w_hde, #o_hse], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
        ins(%x, %wvb : tensor<8x16xf32>, tensor<2x16x8xf32>) outs(%zp : tensor<2x8x8xf32>) {
    ^bb0(%a: f32, %b: f32, %c: f32):
      %m = arith.mulf %a, %b : f32
      %s = arith.addf %c, %m : f32
      linalg.yield %s : f32
    } -> tensor<2x8x8xf32>
    %scores = linalg.generic {indexing_maps = [#q_hse, #k_hte, #s_hst], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
        ins(%q, %k : tensor<2x8x8xf32>, tensor<2x8x8xf32>) outs(%zp : tensor<2x8x8xf32>) {
    ^bb0(%a: f32, %b: f32, %c: f32):
      %m = arith.mulf %a, %b : f32
      %ms = arith.mulf %m, %scale : f32
      %s = arith.addf %c, %ms : f32
      linalg.yield %s : f32
    } -> tensor<2x8x8xf32>
    %er = tensor.empty() : tensor<2x8xf32>
    %m0 = linalg.fill ins(%lowest : f32) outs(%er : tensor<2x8xf32>) -> tensor<2x8xf32>
    %mx = linalg.generic {indexing_maps = [#id3, #row3], iterator_types = ["parallel", "parallel", "reduction"]}
        ins(%scores : tensor<2x8x8xf32>) outs(%m0 : tensor<2x8xf32>) {
    ^bb0(%a: f32, %acc: f32):
      %r = arith.maximumf %acc, %a : f32
      linalg.yield %r : f32
    } -> tensor<2x8xf32>
    %ex = linalg.generic {indexing_maps = [#id3, #row3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
        ins(%scores, %mx : tensor<2x8x8xf32>, tensor<2x8xf32>) outs(%ep : tensor<2x8x8xf32>) {
    ^bb0(%a: f32, %mv: f32, %o: f32):
      %d = arith.subf %a, %mv : f32
      %e = math.exp %d : f32
      linalg.yield %e : f32
    } -> tensor<2x8x8xf32>
    %s0 = linalg.fill ins(%zero : f32) outs(%er : tensor<2x8xf32>) -> tensor<2x8xf32>
    %sm = linalg.generic {indexing_maps = [#id3, #row3], iterator_types = ["parallel", "parallel", "reduction"]}
        ins(%ex : tensor<2x8x8xf32>) outs(%s0 : tensor<2x8xf32>) {
    ^bb0(%a: f32, %acc: f32):
      %r = arith.addf %acc, %a : f32
      linalg.yield %r : f32
    } -> tensor<2x8xf32>
    %p = linalg.generic {indexing_maps = [#id3, #row3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
        ins(%ex, %sm : tensor<2x8x8xf32>, tensor<2x8xf32>) outs(%ep : tensor<2x8x8xf32>) {
    ^bb0(%a: f32, %sv: f32, %o: f32):
      %d = arith.divf %a, %sv : f32
      linalg.yield %d : f32
    } -> tensor<2x8x8xf32>
    %ctx = linalg.generic {indexing_maps = [#p_hst, #v_hte, #c_hse], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
        ins(%p, %v : tensor<2x8x8xf32>, tensor<2x8x8xf32>) outs(%zp : tensor<2x8x8xf32>) {
    ^bb0(%a: f32, %b: f32, %c: f32):
      %m = arith.mulf %a, %b : f32
      %s = arith.addf %c, %m : f32
      linalg.yield %s : f32
    } -> tensor<2x8x8xf32>
    %eo = tensor.empty() : tensor<8x16xf32>
    %zo = linalg.fill ins(%zero : f32) outs(%eo : tensor<8x16xf32>) -> tensor<8x16xf32>
    // the output projection: this block of heads' share of out[s, o]
    %proj = linalg.generic {indexing_maps = [#ctx, #wo, #out], iterator_types = ["parallel", "parallel", "reduction", "reduction"]}
        ins(%ctx, %wob : tensor<2x8x8xf32>, tensor<2x8x16xf32>) outs(%zo : tensor<8x16xf32>) {
    ^bb0(%a: f32, %b: f32, %c: f32):
      %m = arith.mulf %a, %b : f32
      %s = arith.addf %c, %m : f32
      linalg.yield %s : f32
    } -> tensor<8x16xf32>
    tosa.yield %proj : tensor<8x16xf32>
  }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<8x16xf32>
  return %out : tensor<8x16xf32>
}
