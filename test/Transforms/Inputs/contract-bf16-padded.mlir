// The padded contraction of slicer-kernel-contract-padded.mlir with bf16 operands, as mixed precision lowers it:
// each operand widened, masked in f32, rounded back to bf16 (exact) and widened again.
module attributes {slicer.target_avx512 = true, slicer.target_bf16_units = "avx512bf16"} {
  func.func @padded_k_bf16(%a: memref<16x32xbf16>, %b: memref<32x64xbf16>, %valid: index, %c: memref<16x64xf32>) {
    %zero = arith.constant 0.000000e+00 : f32
    linalg.fill ins(%zero : f32) outs(%c : memref<16x64xf32>)
    linalg.generic {indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (k, n)>,
                                     affine_map<(m, n, k) -> (m, n)>],
                    iterator_types = ["parallel", "parallel", "reduction"]}
        ins(%a, %b : memref<16x32xbf16>, memref<32x64xbf16>) outs(%c : memref<16x64xf32>) {
    ^bb0(%x: bf16, %y: bf16, %acc: f32):
      %k = linalg.index 2 : index
      %inside = arith.cmpi ult, %k, %valid : index
      %xw = arith.extf %x : bf16 to f32
      %xm = arith.select %inside, %xw, %zero : f32
      %xr = arith.truncf %xm : f32 to bf16
      %yw = arith.extf %y : bf16 to f32
      %ym = arith.select %inside, %yw, %zero : f32
      %yr = arith.truncf %ym : f32 to bf16
      %xe = arith.extf %xr : bf16 to f32
      %ye = arith.extf %yr : bf16 to f32
      %p = arith.mulf %xe, %ye : f32
      %s = arith.addf %acc, %p : f32
      linalg.yield %s : f32
    }
    return
  }
}
