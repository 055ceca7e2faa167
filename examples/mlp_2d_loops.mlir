// The 2-layer MLP on a 2-D (data x tensor) mesh: a tile<0> loop over `x`
// (rows of %x) containing a Megatron `sum` loop over `y` (w1 by columns, b1,
// w2 by rows). The inner loop leaves partial sums over `y` inside each row
// block; slicer-partition resolves them with one all_reduce over `y` only.
"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 2>} : () -> ()

func.func @mlp(%x: tensor<16x32xf32>, %w1: tensor<32x64xf32>, %b1: tensor<64xf32>,
               %w2: tensor<64x32xf32>) -> tensor<16x32xf32> {
  %out = "slicer.loop"() ({
  ^bb0(%rx: !slicer.range<"x", 2>):
    %xb = "slicer.slice"(%x, %rx) {dim = 0 : i64} : (tensor<16x32xf32>, !slicer.range<"x", 2>) -> tensor<8x32xf32>
    %part = "slicer.loop"() ({
    ^bb0(%ry: !slicer.range<"y", 2>):
      %w1b = "slicer.slice"(%w1, %ry) {dim = 1 : i64} : (tensor<32x64xf32>, !slicer.range<"y", 2>) -> tensor<32x32xf32>
      %b1b = "slicer.slice"(%b1, %ry) {dim = 0 : i64} : (tensor<64xf32>, !slicer.range<"y", 2>) -> tensor<32xf32>
      %w2b = "slicer.slice"(%w2, %ry) {dim = 0 : i64} : (tensor<64x32xf32>, !slicer.range<"y", 2>) -> tensor<32x32xf32>
      %zero = arith.constant 0.0 : f32
      %e1 = tensor.empty() : tensor<8x32xf32>
      %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<8x32xf32>) -> tensor<8x32xf32>
      %h = linalg.matmul ins(%xb, %w1b : tensor<8x32xf32>, tensor<32x32xf32>) outs(%f1 : tensor<8x32xf32>) -> tensor<8x32xf32>
      %hb = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (j)>, affine_map<(i, j) -> (i, j)>],
                            iterator_types = ["parallel", "parallel"]}
          ins(%h, %b1b : tensor<8x32xf32>, tensor<32xf32>) outs(%e1 : tensor<8x32xf32>) {
      ^bb0(%hv: f32, %bv: f32, %o: f32):
        %s = arith.addf %hv, %bv : f32
        %rl = arith.maximumf %s, %zero : f32
        linalg.yield %rl : f32
      } -> tensor<8x32xf32>
      %e2 = tensor.empty() : tensor<8x32xf32>
      %f2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<8x32xf32>) -> tensor<8x32xf32>
      %p = linalg.matmul ins(%hb, %w2b : tensor<8x32xf32>, tensor<32x32xf32>) outs(%f2 : tensor<8x32xf32>) -> tensor<8x32xf32>
      tosa.yield %p : tensor<8x32xf32>
    }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<8x32xf32>
    tosa.yield %part : tensor<8x32xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<16x32xf32>
  return %out : tensor<16x32xf32>
}
