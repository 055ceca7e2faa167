// examples/mlp.mlir at a realistic size: batch 512, model 1024, hidden 4096 (f32; 26 MiB of weights),
// the sizes of issue 14's benchmark. `make demo` runs it Megatron-partitioned on 1 and 2 ranks:
//   slicer-run examples/mlp_large.mlir --mesh y=2 --tactic arg1.1=y --tactic arg3.0=y --random 0 --check --repeat 5
func.func @mlp_large(%x: tensor<512x1024xf32>, %w1: tensor<1024x4096xf32>, %b1: tensor<4096xf32>,
               %w2: tensor<4096x1024xf32>) -> tensor<512x1024xf32> {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<512x4096xf32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<512x4096xf32>) -> tensor<512x4096xf32>
  %h = linalg.matmul ins(%x, %w1 : tensor<512x1024xf32>, tensor<1024x4096xf32>)
                     outs(%f1 : tensor<512x4096xf32>) -> tensor<512x4096xf32>
  // bias add: the bias is broadcast along the rows
  %hb = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (j)>,
                                         affine_map<(i, j) -> (i, j)>],
                        iterator_types = ["parallel", "parallel"]}
      ins(%h, %b1 : tensor<512x4096xf32>, tensor<4096xf32>) outs(%e1 : tensor<512x4096xf32>) {
  ^bb0(%hv: f32, %bv: f32, %o: f32):
    %s = arith.addf %hv, %bv : f32
    linalg.yield %s : f32
  } -> tensor<512x4096xf32>
  %a = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%hb : tensor<512x4096xf32>) outs(%e1 : tensor<512x4096xf32>) {
  ^bb0(%v: f32, %o: f32):
    %r = arith.maximumf %v, %zero : f32
    linalg.yield %r : f32
  } -> tensor<512x4096xf32>
  %e2 = tensor.empty() : tensor<512x1024xf32>
  %f2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<512x1024xf32>) -> tensor<512x1024xf32>
  %y = linalg.matmul ins(%a, %w2 : tensor<512x4096xf32>, tensor<4096x1024xf32>)
                     outs(%f2 : tensor<512x1024xf32>) -> tensor<512x1024xf32>
  return %y : tensor<512x1024xf32>
}
