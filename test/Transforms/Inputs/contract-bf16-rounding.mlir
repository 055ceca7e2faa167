// A bf16 contraction into a local f32 buffer whose only reader rounds it to bf16, transposed (attention's
// context [b, h, s, e] read as [b, s, h, e]); and the same with K = 640, longer than one K block of the bf16
// GEMM, whose f32 C and rounding stay.
#a = affine_map<(b, h, s, e, t) -> (b, h, s, t)>
#v = affine_map<(b, h, s, e, t) -> (b, h, t, e)>
#c = affine_map<(b, h, s, e, t) -> (b, h, s, e)>
#id = affine_map<(b, s, h, e) -> (b, s, h, e)>
#tr = affine_map<(b, s, h, e) -> (b, h, s, e)>
#fill = affine_map<(b, h, s, e) -> ()>
#all = affine_map<(b, h, s, e) -> (b, h, s, e)>
func.func @context(%p: memref<2x4x32x40xbf16>, %v: memref<2x4x40x64xbf16>, %r: memref<2x32x4x64xbf16>) {
  %zero = arith.constant 0.0 : f32
  %c = memref.alloc() {alignment = 64 : i64} : memref<2x4x32x64xf32>
  linalg.generic {indexing_maps = [#fill, #all], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%zero : f32) outs(%c : memref<2x4x32x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  }
  linalg.generic {indexing_maps = [#a, #v, #c], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%p, %v : memref<2x4x32x40xbf16>, memref<2x4x40x64xbf16>) outs(%c : memref<2x4x32x64xf32>) {
  ^bb0(%x: bf16, %y: bf16, %out: f32):
    %xf = arith.extf %x : bf16 to f32
    %yf = arith.extf %y : bf16 to f32
    %m = arith.mulf %xf, %yf : f32
    %s = arith.addf %out, %m : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#tr, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%c : memref<2x4x32x64xf32>) outs(%r : memref<2x32x4x64xbf16>) {
  ^bb0(%x: f32, %o: bf16):
    %t = arith.truncf %x : f32 to bf16
    linalg.yield %t : bf16
  }
  return
}

func.func @long_k(%p: memref<2x4x32x640xbf16>, %v: memref<2x4x640x64xbf16>, %r: memref<2x32x4x64xbf16>) {
  %zero = arith.constant 0.0 : f32
  %c = memref.alloc() {alignment = 64 : i64} : memref<2x4x32x64xf32>
  linalg.generic {indexing_maps = [#fill, #all], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%zero : f32) outs(%c : memref<2x4x32x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  }
  linalg.generic {indexing_maps = [#a, #v, #c], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%p, %v : memref<2x4x32x640xbf16>, memref<2x4x640x64xbf16>) outs(%c : memref<2x4x32x64xf32>) {
  ^bb0(%x: bf16, %y: bf16, %out: f32):
    %xf = arith.extf %x : bf16 to f32
    %yf = arith.extf %y : bf16 to f32
    %m = arith.mulf %xf, %yf : f32
    %s = arith.addf %out, %m : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#tr, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%c : memref<2x4x32x64xf32>) outs(%r : memref<2x32x4x64xbf16>) {
  ^bb0(%x: f32, %o: bf16):
    %t = arith.truncf %x : f32 to bf16
    linalg.yield %t : bf16
  }
  return
}

// A Linear layer's q projection with its bias, as the kernels of a mixed-precision step hold it: C [b, s, h, e]
// (the weight's rows split into heads), read transposed to [b, h, s, e] with the bias [h, e] added in f32 and
// the sum rounded once (torch's addmm under autocast).
#x = affine_map<(b, s, h, e, k) -> (b, s, k)>
#w = affine_map<(b, s, h, e, k) -> (h, e, k)>
#q = affine_map<(b, s, h, e, k) -> (b, s, h, e)>
#heads = affine_map<(b, h, s, e) -> (b, s, h, e)>
#bias = affine_map<(b, h, s, e) -> (h, e)>
#same = affine_map<(b, h, s, e) -> (b, h, s, e)>
func.func @q_bias(%x: memref<2x32x64xbf16>, %w: memref<4x16x64xbf16>, %b: memref<4x16xbf16>, %r: memref<2x4x32x16xbf16>) {
  %zero = arith.constant 0.0 : f32
  %c = memref.alloc() {alignment = 64 : i64} : memref<2x32x4x16xf32>
  linalg.fill ins(%zero : f32) outs(%c : memref<2x32x4x16xf32>)
  linalg.generic {indexing_maps = [#x, #w, #q], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<2x32x64xbf16>, memref<4x16x64xbf16>) outs(%c : memref<2x32x4x16xf32>) {
  ^bb0(%a: bf16, %v: bf16, %out: f32):
    %af = arith.extf %a : bf16 to f32
    %vf = arith.extf %v : bf16 to f32
    %m = arith.mulf %af, %vf : f32
    %s = arith.addf %out, %m : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#heads, #bias, #same], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%c, %b : memref<2x32x4x16xf32>, memref<4x16xbf16>) outs(%r : memref<2x4x32x16xbf16>) {
  ^bb0(%in: f32, %bias: bf16, %o: bf16):
    %bf = arith.extf %bias : bf16 to f32
    %s = arith.addf %in, %bf : f32
    %t = arith.truncf %s : f32 to bf16
    linalg.yield %t : bf16
  }
  return
}

// The zero fill as the frontend writes it: a generic of no input yielding a constant. C still starts at zero
// (no load of C) and the rounding is still the GEMM's.
#mk = affine_map<(m, n, k) -> (m, k)>
#nk = affine_map<(m, n, k) -> (n, k)>
#mn = affine_map<(m, n, k) -> (m, n)>
#mn2 = affine_map<(m, n) -> (m, n)>
func.func @frontend_fill(%x: memref<48x96xbf16>, %w: memref<80x96xbf16>, %r: memref<48x80xbf16>) {
  %zero = arith.constant 0.0 : f32
  %c = memref.alloc() {alignment = 64 : i64} : memref<48x80xf32>
  linalg.generic {indexing_maps = [#mn2], iterator_types = ["parallel", "parallel"]} outs(%c : memref<48x80xf32>) {
  ^bb0(%o: f32):
    linalg.yield %zero : f32
  }
  linalg.generic {indexing_maps = [#mk, #nk, #mn], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<48x96xbf16>, memref<80x96xbf16>) outs(%c : memref<48x80xf32>) {
  ^bb0(%a: bf16, %b: bf16, %out: f32):
    %af = arith.extf %a : bf16 to f32
    %bf = arith.extf %b : bf16 to f32
    %m = arith.mulf %af, %bf : f32
    %s = arith.addf %out, %m : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#mn2, #mn2], iterator_types = ["parallel", "parallel"]}
      ins(%c : memref<48x80xf32>) outs(%r : memref<48x80xbf16>) {
  ^bb0(%in: f32, %o: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  }
  return
}

// fc1 of a mixed-precision step: the product plus the bias rounded to bf16 and widened back to f32 (the gelu's
// input), in place in the f32 result.
#n1 = affine_map<(m, n) -> (n)>
func.func @fc1_widen(%x: memref<48x96xbf16>, %w: memref<80x96xbf16>, %b: memref<80xbf16>, %r: memref<48x80xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.generic {indexing_maps = [#mn2], iterator_types = ["parallel", "parallel"]} outs(%r : memref<48x80xf32>) {
  ^bb0(%o: f32):
    linalg.yield %zero : f32
  }
  linalg.generic {indexing_maps = [#mk, #nk, #mn], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<48x96xbf16>, memref<80x96xbf16>) outs(%r : memref<48x80xf32>) {
  ^bb0(%a: bf16, %v: bf16, %out: f32):
    %af = arith.extf %a : bf16 to f32
    %vf = arith.extf %v : bf16 to f32
    %m = arith.mulf %af, %vf : f32
    %s = arith.addf %out, %m : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#mn2, #n1, #mn2], iterator_types = ["parallel", "parallel"]}
      ins(%r, %b : memref<48x80xf32>, memref<80xbf16>) outs(%r : memref<48x80xf32>) {
  ^bb0(%in: f32, %bias: bf16, %o: f32):
    %bf = arith.extf %bias : bf16 to f32
    %s = arith.addf %in, %bf : f32
    %t = arith.truncf %s : f32 to bf16
    %e = arith.extf %t : bf16 to f32
    linalg.yield %e : f32
  }
  return
}

// The attention projection (and fc2) of a mixed-precision step: the product plus the bias rounded, added to
// the residual stream in f32 and rounded again.
func.func @proj_residual(%x: memref<48x96xbf16>, %w: memref<80x96xbf16>, %b: memref<80xbf16>,
                         %res: memref<48x80xbf16>, %r: memref<48x80xbf16>) {
  %zero = arith.constant 0.0 : f32
  %c = memref.alloc() {alignment = 64 : i64} : memref<48x80xf32>
  linalg.generic {indexing_maps = [#mn2], iterator_types = ["parallel", "parallel"]} outs(%c : memref<48x80xf32>) {
  ^bb0(%o: f32):
    linalg.yield %zero : f32
  }
  linalg.generic {indexing_maps = [#mk, #nk, #mn], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<48x96xbf16>, memref<80x96xbf16>) outs(%c : memref<48x80xf32>) {
  ^bb0(%a: bf16, %v: bf16, %out: f32):
    %af = arith.extf %a : bf16 to f32
    %vf = arith.extf %v : bf16 to f32
    %m = arith.mulf %af, %vf : f32
    %s = arith.addf %out, %m : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#mn2, #mn2, #n1, #mn2], iterator_types = ["parallel", "parallel"]}
      ins(%res, %c, %b : memref<48x80xbf16>, memref<48x80xf32>, memref<80xbf16>) outs(%r : memref<48x80xbf16>) {
  ^bb0(%in: bf16, %acc: f32, %bias: bf16, %o: bf16):
    %rf = arith.extf %in : bf16 to f32
    %bf = arith.extf %bias : bf16 to f32
    %s = arith.addf %acc, %bf : f32
    %t = arith.truncf %s : f32 to bf16
    %e = arith.extf %t : bf16 to f32
    %y = arith.addf %rf, %e : f32
    %z = arith.truncf %y : f32 to bf16
    linalg.yield %z : bf16
  }
  return
}

// The rounding's output allocated after the contraction: the GEMM cannot write it (it does not exist yet), so
// the f32 C and the rounding stay.
func.func @late_output(%x: memref<48x96xbf16>, %w: memref<80x96xbf16>, %out: memref<48x80xbf16>) {
  %zero = arith.constant 0.0 : f32
  %c = memref.alloc() {alignment = 64 : i64} : memref<48x80xf32>
  linalg.fill ins(%zero : f32) outs(%c : memref<48x80xf32>)
  linalg.generic {indexing_maps = [#mk, #nk, #mn], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<48x96xbf16>, memref<80x96xbf16>) outs(%c : memref<48x80xf32>) {
  ^bb0(%a: bf16, %v: bf16, %acc: f32):
    %af = arith.extf %a : bf16 to f32
    %vf = arith.extf %v : bf16 to f32
    %m = arith.mulf %af, %vf : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  %r = memref.alloc() {alignment = 64 : i64} : memref<48x80xbf16>
  linalg.generic {indexing_maps = [#mn2, #mn2], iterator_types = ["parallel", "parallel"]}
      ins(%c : memref<48x80xf32>) outs(%r : memref<48x80xbf16>) {
  ^bb0(%in: f32, %o: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  }
  memref.copy %r, %out : memref<48x80xbf16> to memref<48x80xbf16>
  return
}
