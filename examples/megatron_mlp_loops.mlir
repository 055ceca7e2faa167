// A 2-layer MLP, relu(x @ w1 + b1) @ w2, written with slicer loops the way
// Megatron tensor parallelism partitions it over mesh axis `y`: the hidden dim
// is tiled (w1 by columns, b1, w2 by rows), each device computes a partial
// product, and one `sum` loop adds the partials. Lowering the loops gives a
// sequential program equal to the unpartitioned MLP.
"slicer.mesh"() {sym_name = "mesh", axes = ["y"], shape = array<i64: 4>} : () -> ()

func.func @mlp(%x: tensor<64x128xf32>, %w1: tensor<128x256xf32>, %b1: tensor<256xf32>,
               %w2: tensor<256x128xf32>) -> tensor<64x128xf32> {
  %out = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"y", 4>):
    %w1b = "slicer.slice"(%w1, %r) {dim = 1 : i64} : (tensor<128x256xf32>, !slicer.range<"y", 4>) -> tensor<128x64xf32>
    %b1b = "slicer.slice"(%b1, %r) {dim = 0 : i64} : (tensor<256xf32>, !slicer.range<"y", 4>) -> tensor<64xf32>
    %w2b = "slicer.slice"(%w2, %r) {dim = 0 : i64} : (tensor<256x128xf32>, !slicer.range<"y", 4>) -> tensor<64x128xf32>
    %zero = arith.constant 0.0 : f32
    %e1 = tensor.empty() : tensor<64x64xf32>
    %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<64x64xf32>) -> tensor<64x64xf32>
    %h = linalg.matmul ins(%x, %w1b : tensor<64x128xf32>, tensor<128x64xf32>) outs(%f1 : tensor<64x64xf32>) -> tensor<64x64xf32>
    %hb = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (j)>, affine_map<(i, j) -> (i, j)>],
                          iterator_types = ["parallel", "parallel"]}
        ins(%h, %b1b : tensor<64x64xf32>, tensor<64xf32>) outs(%e1 : tensor<64x64xf32>) {
    ^bb0(%hv: f32, %bv: f32, %o: f32):
      %s = arith.addf %hv, %bv : f32
      %rl = arith.maximumf %s, %zero : f32
      linalg.yield %rl : f32
    } -> tensor<64x64xf32>
    %e2 = tensor.empty() : tensor<64x128xf32>
    %f2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<64x128xf32>) -> tensor<64x128xf32>
    %partial = linalg.matmul ins(%hb, %w2b : tensor<64x64xf32>, tensor<64x128xf32>) outs(%f2 : tensor<64x128xf32>) -> tensor<64x128xf32>
    tosa.yield %partial : tensor<64x128xf32>
  }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<64x128xf32>
  return %out : tensor<64x128xf32>
}
