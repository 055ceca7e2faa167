// Context parallelism by heads (DeepSpeed-Ulysses, `strategies.context_parallel(..., method="all_to_all")`):
// the import's attention as python/slicer/frontends/context_heads.py leaves it, q, k and v read through a
// `slicer.annotate` tiling the heads (dim 0) and the output left through one tiling the sequence (dim 1).
// The arguments and the result are tiled on the sequence, as between attention blocks: each annotated value moves
// by one all_to_all (3 to heads, 1 back), and the scores, the softmax and both products are computed on each
// device's heads over the whole sequence (4 heads, 8 tokens, 6 features a head; x=2).

// RUN: slicer-opt %s --print-collectives -p 'slicer-apply-tactics{tactics=arg0.1=x;arg1.1=x;arg2.1=x;result0.1=x},slicer-propagate,slicer-partition' 2>&1 >/dev/null | FileCheck %s --check-prefix=COLLECTIVES
// COLLECTIVES: 1. shard.all_to_all over [x] 4x4x6 -> 2x8x6 -> {{\[\[}}x],[],[]]: 192 B received per device
// COLLECTIVES: 2. shard.all_to_all over [x] 4x4x6 -> 2x8x6 -> {{\[\[}}x],[],[]]: 192 B received per device
// COLLECTIVES: 3. shard.all_to_all over [x] 4x4x6 -> 2x8x6 -> {{\[\[}}x],[],[]]: 192 B received per device
// COLLECTIVES: 4. shard.all_to_all over [x] 2x8x6 -> 4x4x6 -> {{\[\[}}],[x],[]]: 192 B received per device
// COLLECTIVES: total: 4 collectives

// RUN: slicer-opt %s -p 'slicer-apply-tactics{tactics=arg0.1=x;arg1.1=x;arg2.1=x;result0.1=x},slicer-propagate,slicer-partition' | FileCheck %s
// CHECK-LABEL: func.func @attention
// CHECK-SAME: (%[[Q:.*]]: tensor<4x4x6xf32> {slicer.dist = "{{\[\[}}],[x],[]]"}, %[[K:.*]]: tensor<4x4x6xf32> {{.*}}, %[[V:.*]]: tensor<4x4x6xf32> {{.*}})
// CHECK: %[[QH:.*]] = shard.all_to_all %[[Q]] on @mesh grid_axes = [0] split_axis = 0 concat_axis = 1 {{.*}}: tensor<4x4x6xf32> -> tensor<2x8x6xf32>
// CHECK: %[[KH:.*]] = shard.all_to_all %[[K]] on @mesh grid_axes = [0] split_axis = 0 concat_axis = 1 {{.*}}: tensor<4x4x6xf32> -> tensor<2x8x6xf32>
// CHECK: linalg.generic {{.*}} ins(%[[QH]], %[[KH]] : tensor<2x8x6xf32>, tensor<2x8x6xf32>) outs(%{{.*}} : tensor<2x8x8xf32>)
// CHECK: %[[VH:.*]] = shard.all_to_all %[[V]] on @mesh grid_axes = [0] split_axis = 0 concat_axis = 1 {{.*}}: tensor<4x4x6xf32> -> tensor<2x8x6xf32>
// CHECK: %[[O:.*]] = linalg.generic {{.*}} ins(%{{.*}}, %[[VH]] : tensor<2x8x8xf32>, tensor<2x8x6xf32>) outs(%{{.*}} : tensor<2x8x6xf32>)
// CHECK: %[[B:.*]] = shard.all_to_all %[[O]] on @mesh grid_axes = [0] split_axis = 1 concat_axis = 0 {{.*}}: tensor<2x8x6xf32> -> tensor<4x4x6xf32>
// CHECK: return %[[B]]

#qk = affine_map<(h, i, j, e) -> (h, i, e)>
#kk = affine_map<(h, i, j, e) -> (h, j, e)>
#ss = affine_map<(h, i, j, e) -> (h, i, j)>
#s3 = affine_map<(h, i, j) -> (h, i, j)>
#r3 = affine_map<(h, i, j) -> (h, i)>
#pv_p = affine_map<(h, i, e, j) -> (h, i, j)>
#pv_v = affine_map<(h, i, e, j) -> (h, j, e)>
#pv_o = affine_map<(h, i, e, j) -> (h, i, e)>
"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 2>} : () -> ()
func.func @attention(%q: tensor<4x8x6xf32>, %k: tensor<4x8x6xf32>, %v: tensor<4x8x6xf32>) -> tensor<4x8x6xf32> {
  %zero = arith.constant 0.0 : f32
  %lowest = arith.constant -3.0e38 : f32
  %qh = "slicer.annotate"(%q) {sharding = #slicer.sharding<@mesh, [["x"], [], []]>} : (tensor<4x8x6xf32>) -> tensor<4x8x6xf32>
  %kh = "slicer.annotate"(%k) {sharding = #slicer.sharding<@mesh, [["x"], [], []]>} : (tensor<4x8x6xf32>) -> tensor<4x8x6xf32>
  %vh = "slicer.annotate"(%v) {sharding = #slicer.sharding<@mesh, [["x"], [], []]>} : (tensor<4x8x6xf32>) -> tensor<4x8x6xf32>
  %e3 = tensor.empty() : tensor<4x8x8xf32>
  %z3 = linalg.fill ins(%zero : f32) outs(%e3 : tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  %scores = linalg.generic {indexing_maps = [#qk, #kk, #ss], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%qh, %kh : tensor<4x8x6xf32>, tensor<4x8x6xf32>) outs(%z3 : tensor<4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x8x8xf32>
  %e2 = tensor.empty() : tensor<4x8xf32>
  %low2 = linalg.fill ins(%lowest : f32) outs(%e2 : tensor<4x8xf32>) -> tensor<4x8xf32>
  %top = linalg.generic {indexing_maps = [#s3, #r3], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%scores : tensor<4x8x8xf32>) outs(%low2 : tensor<4x8xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %m = arith.maximumf %a, %acc : f32
    linalg.yield %m : f32
  } -> tensor<4x8xf32>
  %weights = linalg.generic {indexing_maps = [#s3, #r3, #s3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%scores, %top : tensor<4x8x8xf32>, tensor<4x8xf32>) outs(%e3 : tensor<4x8x8xf32>) {
  ^bb0(%a: f32, %t: f32, %o: f32):
    %d = arith.subf %a, %t : f32
    %x = math.exp %d : f32
    linalg.yield %x : f32
  } -> tensor<4x8x8xf32>
  %z2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<4x8xf32>) -> tensor<4x8xf32>
  %total = linalg.generic {indexing_maps = [#s3, #r3], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%weights : tensor<4x8x8xf32>) outs(%z2 : tensor<4x8xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %s = arith.addf %a, %acc : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  %probs = linalg.generic {indexing_maps = [#s3, #r3, #s3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%weights, %total : tensor<4x8x8xf32>, tensor<4x8xf32>) outs(%e3 : tensor<4x8x8xf32>) {
  ^bb0(%a: f32, %t: f32, %o: f32):
    %d = arith.divf %a, %t : f32
    linalg.yield %d : f32
  } -> tensor<4x8x8xf32>
  %eo = tensor.empty() : tensor<4x8x6xf32>
  %zo = linalg.fill ins(%zero : f32) outs(%eo : tensor<4x8x6xf32>) -> tensor<4x8x6xf32>
  %out = linalg.generic {indexing_maps = [#pv_p, #pv_v, #pv_o], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%probs, %vh : tensor<4x8x8xf32>, tensor<4x8x6xf32>) outs(%zo : tensor<4x8x6xf32>) {
  ^bb0(%p: f32, %b: f32, %acc: f32):
    %m = arith.mulf %p, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x8x6xf32>
  %back = "slicer.annotate"(%out) {sharding = #slicer.sharding<@mesh, [[], ["x"], []]>} : (tensor<4x8x6xf32>) -> tensor<4x8x6xf32>
  return %back : tensor<4x8x6xf32>
}
