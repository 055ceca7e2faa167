// The bf16 embedding gradient of slicer-kernel-onehot.mlir (mixed precision's widened mask and gradient).
#mk = affine_map<(v, d, b, s) -> (b, s)>
#mv = affine_map<(v, d, b, s) -> (v)>
#mg = affine_map<(v, d, b, s) -> (b, s, d)>
#mo = affine_map<(v, d, b, s) -> (v, d)>
func.func @embedding_grad_bf16(%idx: memref<2x8xi64>, %ids: memref<64xi64>, %g: memref<2x8x32xbf16>, %out: memref<64x32xf32>) {
  %c-1 = arith.constant -1 : i64
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%out : memref<64x32xf32>)
  linalg.generic {indexing_maps = [#mk, #mv, #mg, #mo], iterator_types = ["parallel", "parallel", "reduction", "reduction"]}
      ins(%idx, %ids, %g : memref<2x8xi64>, memref<64xi64>, memref<2x8x32xbf16>) outs(%out : memref<64x32xf32>) {
  ^bb0(%in: i64, %id: i64, %x: bf16, %acc: f32):
    %w = arith.extf %x : bf16 to f32
    %0 = arith.cmpi ne, %in, %c-1 : i64
    %1 = arith.cmpi eq, %in, %id : i64
    %2 = arith.andi %1, %0 : i1
    %3 = arith.uitofp %2 : i1 to bf16
    %m = arith.extf %3 : bf16 to f32
    %4 = arith.mulf %m, %w : f32
    %5 = arith.addf %acc, %4 : f32
    linalg.yield %5 : f32
  }
  return
}
