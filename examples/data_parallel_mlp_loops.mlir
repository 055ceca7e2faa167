// The 2-layer MLP relu(x @ w1 + b1) @ w2 partitioned data parallel over mesh
// axis `x`: one tile<0> loop whose body runs the whole MLP on a block of rows
// of %x. After slicer-partition, %x and the result arrive/leave tiled by rows,
// the weights replicated, and the forward pass has no collective at all.
"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 4>} : () -> ()

func.func @mlp(%x: tensor<16x32xf32>, %w1: tensor<32x64xf32>, %b1: tensor<64xf32>,
               %w2: tensor<64x32xf32>) -> tensor<16x32xf32> {
  %out = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 4>):
    %xb = "slicer.slice"(%x, %r) {dim = 0 : i64} : (tensor<16x32xf32>, !slicer.range<"x", 4>) -> tensor<4x32xf32>
    %zero = arith.constant 0.0 : f32
    %e1 = tensor.empty() : tensor<4x64xf32>
    %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<4x64xf32>) -> tensor<4x64xf32>
    %h = linalg.matmul ins(%xb, %w1 : tensor<4x32xf32>, tensor<32x64xf32>) outs(%f1 : tensor<4x64xf32>) -> tensor<4x64xf32>
    %hb = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (j)>, affine_map<(i, j) -> (i, j)>],
                          iterator_types = ["parallel", "parallel"]}
        ins(%h, %b1 : tensor<4x64xf32>, tensor<64xf32>) outs(%e1 : tensor<4x64xf32>) {
    ^bb0(%hv: f32, %bv: f32, %o: f32):
      %s = arith.addf %hv, %bv : f32
      %rl = arith.maximumf %s, %zero : f32
      linalg.yield %rl : f32
    } -> tensor<4x64xf32>
    %e2 = tensor.empty() : tensor<4x32xf32>
    %f2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<4x32xf32>) -> tensor<4x32xf32>
    %y = linalg.matmul ins(%hb, %w2 : tensor<4x64xf32>, tensor<64x32xf32>) outs(%f2 : tensor<4x32xf32>) -> tensor<4x32xf32>
    tosa.yield %y : tensor<4x32xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<16x32xf32>
  return %out : tensor<16x32xf32>
}
