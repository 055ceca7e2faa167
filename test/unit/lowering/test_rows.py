"""Elementwise ops and reductions as generated vector loops fused row by row (`lowering/rows.py`).

Compared with numpy on row lengths that are not multiples of the vector width or the unroll (scalar
and vector remainders), with the fusion report checked where it matters (softmax and layernorm in one
loop nest over rows).
"""

import math
from pathlib import Path

import numpy as np
import pytest
from mlir import ir

from slicer.core.pipeline import run_pipeline
from slicer.dialect import make_context
from slicer.lowering import DEFAULT_PIPELINE, compile_function, compile_library
from slicer.lowering.rows import rows_module

RNG = np.random.default_rng(2)
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def scaled(name: str, rows: int, cols: int) -> str:
    """examples/<name>.mlir (8 x 16) at rows x cols."""
    text = (EXAMPLES / f"{name}.mlir").read_text()
    return (text.replace("8x16", f"{rows}x{cols}").replace("tensor<8xf32>", f"tensor<{rows}xf32>")
            .replace("tensor<16xf32>", f"tensor<{cols}xf32>").replace("16.0 : f32", f"{cols}.0 : f32"))


def fused_groups(text: str) -> list[str]:
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        DEFAULT_PIPELINE.until("bufferize").run(module)
        run_pipeline(module, "func.func(linalg-generalize-named-ops)")
        return rows_module(module)


@pytest.mark.parametrize("rows,cols", [(5, 131), (3, 64), (2, 1), (7, 1000)])
def test_softmax_and_layernorm_equal_numpy(cache_dir, rows, cols):
    library = compile_library(scaled("softmax", rows, cols) + scaled("layernorm", rows, cols), cache_dir=cache_dir)
    x = RNG.standard_normal((rows, cols), dtype=np.float32) * 4
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(library["softmax"](x), e / e.sum(1, keepdims=True), rtol=2e-6, atol=1e-7)
    gamma, beta = RNG.standard_normal(cols, dtype=np.float32), RNG.standard_normal(cols, dtype=np.float32)
    mean = x.mean(1, keepdims=True)
    expected = (x - mean) / np.sqrt(((x - mean) ** 2).mean(1, keepdims=True) + 1e-5) * gamma + beta
    np.testing.assert_allclose(library["layernorm"](x, gamma, beta), expected, rtol=1e-4, atol=1e-4)


def test_softmax_and_layernorm_are_one_loop_nest_over_rows():
    assert fused_groups(scaled("softmax", 64, 256)) == ["@__slicer_rows_0: 6 op(s), 1 row dim(s)"]
    assert fused_groups(scaled("layernorm", 64, 256)) == ["@__slicer_rows_0: 6 op(s), 1 row dim(s)"]


def test_two_elementwise_ops_fuse_over_rows_and_keep_their_lane():
    """A bias broadcast then add + relu: one row dim (not two, which would leave no vector lane)."""
    text = """
func.func @f(%x: tensor<64x256xf32>, %b: tensor<256xf32>) -> tensor<64x256xf32> {
  %e = tensor.empty() : tensor<64x256xf32>
  %bb = linalg.broadcast ins(%b : tensor<256xf32>) outs(%e : tensor<64x256xf32>) dimensions = [0]
  %s = arith.addf %x, %bb : tensor<64x256xf32>
  %zeros = arith.constant dense<0.0> : tensor<64x256xf32>
  %r = arith.maximumf %s, %zeros : tensor<64x256xf32>
  return %r : tensor<64x256xf32>
}
"""
    assert fused_groups(text) == ["@__slicer_rows_0: 2 op(s), 1 row dim(s)"]


GELU = """
func.func @gelu(%x: tensor<{r}x{c}xf32>, %b: tensor<{c}xf32>) -> tensor<{r}x{c}xf32> {{
  %e = tensor.empty() : tensor<{r}x{c}xf32>
  %y = linalg.generic {{indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (j)>,
      affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}}
      ins(%x, %b : tensor<{r}x{c}xf32>, tensor<{c}xf32>) outs(%e : tensor<{r}x{c}xf32>) {{
  ^bb0(%v: f32, %bv: f32, %o: f32):
    %h = arith.addf %v, %bv : f32
    %c0 = arith.constant 0.044715 : f32
    %c1 = arith.constant 0.7978845608 : f32
    %half = arith.constant 0.5 : f32
    %one = arith.constant 1.0 : f32
    %h3 = arith.mulf %h, %h : f32
    %h3b = arith.mulf %h3, %h : f32
    %t0 = arith.mulf %h3b, %c0 : f32
    %t1 = arith.addf %h, %t0 : f32
    %t2 = arith.mulf %t1, %c1 : f32
    %th = math.tanh %t2 : f32
    %t3 = arith.addf %th, %one : f32
    %t4 = arith.mulf %t3, %half : f32
    %g = arith.mulf %t4, %h : f32
    %er = math.erf %h : f32
    %sum = arith.addf %g, %er : f32
    linalg.yield %sum : f32
  }} -> tensor<{r}x{c}xf32>
  return %y : tensor<{r}x{c}xf32>
}}
"""


def test_bias_gelu_tanh_and_erf(cache_dir):
    r, c = 6, 333
    kernel = compile_library(GELU.format(r=r, c=c), cache_dir=cache_dir)["gelu"]
    x = RNG.standard_normal((r, c), dtype=np.float32) * 3
    b = RNG.standard_normal(c, dtype=np.float32)
    h = (x + b).astype(np.float64)
    erf = np.vectorize(math.erf)(h)
    expected = 0.5 * h * (1 + np.tanh(0.7978845608 * (h + 0.044715 * h**3))) + erf
    np.testing.assert_allclose(kernel(x, b), expected, rtol=1e-5, atol=1e-5)


MATH = """
func.func @f(%x: tensor<{n}x{t}>) -> (tensor<{n}x{t}>, tensor<{n}x{t}>, tensor<{n}x{t}>, tensor<{n}x{t}>) {{
  %a = math.exp %x : tensor<{n}x{t}>
  %b = math.tanh %x : tensor<{n}x{t}>
  %c = math.erf %x : tensor<{n}x{t}>
  %ax = math.absf %x : tensor<{n}x{t}>
  %d = math.log %ax : tensor<{n}x{t}>
  return %a, %b, %c, %d : tensor<{n}x{t}>, tensor<{n}x{t}>, tensor<{n}x{t}>, tensor<{n}x{t}>
}}
"""


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("features", ["", "-avx512f"])
def test_math_functions_are_accurate(cache_dir, dtype, features):
    """The vector expansions (vector_math.py) within a few ulp of numpy, special values included; with
    AVX-512 (exp's vscalef) and without (exponent-bit arithmetic)."""
    from slicer.lowering import Target
    from slicer.lowering.emitter import host_has_avx512

    if not features and not host_has_avx512():
        # Code using AVX-512 instructions cannot run here; the "-avx512f" case still covers this host.
        pytest.skip("this host has no AVX-512")
    np_dtype = np.float32 if dtype == "f32" else np.float64
    x = np.concatenate([np.linspace(-30, 30, 20001), np.geomspace(1e-30, 700, 3000), -np.geomspace(1e-30, 700, 3000),
                        [0.0, np.inf, -np.inf, np.nan, 88.5, 89.0, -87.0, -100.0, -104.0, 1e-40]]).astype(np_dtype)
    kernel = compile_library(MATH.format(n=len(x), t=dtype), cache_dir=cache_dir, target=Target(features=features))["f"]
    exp, tanh, erf, log = kernel(x)
    x64 = x.astype(np.float64)
    with np.errstate(all="ignore"):
        references = {"exp": (exp, np.exp(x64)), "tanh": (tanh, np.tanh(x64)),
                      "erf": (erf, np.vectorize(math.erf)(x64)), "log": (log, np.log(np.abs(x64)))}
    eps = np.finfo(np_dtype).eps
    tiny = np.finfo(np_dtype).tiny
    for name, (ours, ref) in references.items():
        with np.errstate(over="ignore"):
            ref = ref.astype(np_dtype).astype(np.float64)  # overflow/underflow as in this precision
        ours = ours.astype(np.float64)
        normal = np.isfinite(ref) & (np.abs(ref) >= tiny)
        relative = np.abs(ours[normal] - ref[normal]) / np.abs(ref[normal])
        assert relative.max() <= 4 * eps, f"{name}: {relative.max() / eps:.1f} ulp at x={x[normal][relative.argmax()]}"
        special = ~np.isfinite(ref)
        np.testing.assert_array_equal(ours[special], ref[special], err_msg=name)
        assert np.all(np.abs(ours[~normal & np.isfinite(ref)]) <= tiny), name


REDUCTIONS = """
func.func @red(%x: tensor<{r}x{c}xf32>, %i: tensor<{r}x{c}xi32>) ->
    (tensor<{c}xf32>, tensor<{r}xf32>, tensor<{r}xf32>, tensor<{r}xi32>, tensor<{r}x{c}xf64>) {{
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %big = arith.constant 3.0e38 : f32
  %izero = arith.constant 0 : i32
  %ec = tensor.empty() : tensor<{c}xf32>
  %er = tensor.empty() : tensor<{r}xf32>
  %eri = tensor.empty() : tensor<{r}xi32>
  %zc = linalg.fill ins(%zero : f32) outs(%ec : tensor<{c}xf32>) -> tensor<{c}xf32>
  %colsum = linalg.generic {{indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (j)>], iterator_types =
      ["reduction", "parallel"]}}
      ins(%x : tensor<{r}x{c}xf32>) outs(%zc : tensor<{c}xf32>) {{
  ^bb0(%v: f32, %acc: f32):
    %s = arith.addf %acc, %v : f32
    linalg.yield %s : f32
  }} -> tensor<{c}xf32>
  %big0 = linalg.fill ins(%big : f32) outs(%er : tensor<{r}xf32>) -> tensor<{r}xf32>
  %rowmin = linalg.generic {{indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>], iterator_types =
      ["parallel", "reduction"]}}
      ins(%x : tensor<{r}x{c}xf32>) outs(%big0 : tensor<{r}xf32>) {{
  ^bb0(%v: f32, %acc: f32):
    %s = arith.minimumf %acc, %v : f32
    linalg.yield %s : f32
  }} -> tensor<{r}xf32>
  %one0 = linalg.fill ins(%one : f32) outs(%er : tensor<{r}xf32>) -> tensor<{r}xf32>
  %rowprod = linalg.generic {{indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>], iterator_types
      = ["parallel", "reduction"]}}
      ins(%x : tensor<{r}x{c}xf32>) outs(%one0 : tensor<{r}xf32>) {{
  ^bb0(%v: f32, %acc: f32):
    %a = math.absf %v : f32
    %q = arith.addf %a, %one : f32
    %p = math.sqrt %q : f32
    %s = arith.mulf %acc, %p : f32
    linalg.yield %s : f32
  }} -> tensor<{r}xf32>
  %zi = linalg.fill ins(%izero : i32) outs(%eri : tensor<{r}xi32>) -> tensor<{r}xi32>
  %isum = linalg.generic {{indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>], iterator_types =
      ["parallel", "reduction"]}}
      ins(%i : tensor<{r}x{c}xi32>) outs(%zi : tensor<{r}xi32>) {{
  ^bb0(%v: i32, %acc: i32):
    %s = arith.addi %acc, %v : i32
    linalg.yield %s : i32
  }} -> tensor<{r}xi32>
  %e64 = tensor.empty() : tensor<{r}x{c}xf64>
  %wide = linalg.generic {{indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>,
      affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]}}
      ins(%x, %rowmin : tensor<{r}x{c}xf32>, tensor<{r}xf32>) outs(%e64 : tensor<{r}x{c}xf64>) {{
  ^bb0(%v: f32, %m: f32, %o: f64):
    %d = arith.subf %v, %m : f32
    %w = arith.extf %d : f32 to f64
    linalg.yield %w : f64
  }} -> tensor<{r}x{c}xf64>
  return %colsum, %rowmin, %rowprod, %isum, %wide : tensor<{c}xf32>, tensor<{r}xf32>, tensor<{r}xf32>, tensor<{r}xi32>,
      tensor<{r}x{c}xf64>
}}
"""


@pytest.mark.parametrize("rows,cols", [(9, 77), (4, 256), (1, 3)])
def test_reductions_of_every_kind(cache_dir, rows, cols):
    """Column sums (reduction outside the lane), row min/product, integer sums, widening."""
    kernel = compile_library(REDUCTIONS.format(r=rows, c=cols), cache_dir=cache_dir)["red"]
    x = RNG.standard_normal((rows, cols), dtype=np.float32)
    i = RNG.integers(-1000, 1000, (rows, cols), dtype=np.int32)
    colsum, rowmin, rowprod, isum, wide = kernel(x, i)
    np.testing.assert_allclose(colsum, x.sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(rowmin, x.min(1))
    np.testing.assert_allclose(rowprod, np.sqrt(np.abs(x) + 1).prod(1), rtol=1e-5)
    np.testing.assert_array_equal(isum, i.sum(1))
    np.testing.assert_array_equal(wide, (x - x.min(1, keepdims=True)).astype(np.float64))


def test_erf_runs_in_the_jit_too():
    """convert-math-to-libm in the JIT pipeline: math.erf has no LLVM intrinsic."""
    text = ("func.func @f(%x: tensor<5xf32>) -> tensor<5xf32> {\n  %e = math.erf %x : tensor<5xf32>\n"
            "  return %e : tensor<5xf32>\n}")
    x = np.array([-2, -0.5, 0, 0.25, 3], np.float32)
    np.testing.assert_allclose(compile_function(text)(x), [math.erf(v) for v in x], rtol=1e-6)


def test_transposes_are_left_to_the_vectorizer(cache_dir):
    text = """
func.func @t(%x: tensor<37x45xf32>) -> tensor<45x37xf32> {
  %e = tensor.empty() : tensor<45x37xf32>
  %t = linalg.transpose ins(%x : tensor<37x45xf32>) outs(%e : tensor<45x37xf32>) permutation = [1, 0]
  return %t : tensor<45x37xf32>
}
"""
    assert fused_groups(text) == []
    x = RNG.standard_normal((37, 45), dtype=np.float32)
    np.testing.assert_array_equal(compile_library(text, cache_dir=cache_dir)["t"](x), x.T)


@pytest.mark.slow
def test_large_outputs_are_right_with_and_without_alignment(cache_dir):
    """softmax over a 16 MiB output: non-temporal final stores when the output is 64-byte aligned (checked
    at run time), regular stores otherwise; the same result either way."""
    from slicer.lowering import aligned_empty

    kernel = compile_library(scaled("softmax", 4096, 1024), cache_dir=cache_dir)["softmax"]
    x = RNG.standard_normal((4096, 1024), dtype=np.float32)
    e = np.exp(x - x.max(1, keepdims=True))
    expected = e / e.sum(1, keepdims=True)
    aligned = aligned_empty((4096, 1024), np.float32)
    misaligned = np.empty(4096 * 1024 + 1, np.float32)[1:].reshape(4096, 1024)
    for out in (aligned, misaligned):
        kernel(x, out=out)
        np.testing.assert_allclose(out, expected, rtol=2e-6, atol=1e-8)


ACCUMULATE_THEN_OVERWRITE = """
#id = affine_map<(i, j) -> (i, j)>
func.func @f(%a: tensor<{m}x{k}x{t}>, %b: tensor<{k}x{n}x{t}>, %x: tensor<{m}x{k}x{n}x{t}>)
    -> (tensor<{m}x{n}x{t}>, tensor<{m}x{n}x{t}>) {{
  %zero = arith.constant {zero} : {t}
  %e = tensor.empty() : tensor<{m}x{n}x{t}>
  %f = linalg.fill ins(%zero : {t}) outs(%e : tensor<{m}x{n}x{t}>) -> tensor<{m}x{n}x{t}>
  %mm = linalg.matmul ins(%a, %b : tensor<{m}x{k}x{t}>, tensor<{k}x{n}x{t}>) outs(%f : tensor<{m}x{n}x{t}>) ->
      tensor<{m}x{n}x{t}>
  %neg = linalg.generic {{indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}}
      ins(%mm : tensor<{m}x{n}x{t}>) outs(%e : tensor<{m}x{n}x{t}>) {{
  ^bb0(%v: {t}, %o: {t}):
    %r = {sub} %zero, %v : {t}
    linalg.yield %r : {t}
  }} -> tensor<{m}x{n}x{t}>
  %e2 = tensor.empty() : tensor<{m}x{n}x{t}>
  %f2 = linalg.fill ins(%zero : {t}) outs(%e2 : tensor<{m}x{n}x{t}>) -> tensor<{m}x{n}x{t}>
  %s = linalg.generic {{indexing_maps = [affine_map<(i, k, j) -> (i, k, j)>, affine_map<(i, k, j) -> (i, j)>],
                       iterator_types = ["parallel", "reduction", "parallel"]}}
      ins(%x : tensor<{m}x{k}x{n}x{t}>) outs(%f2 : tensor<{m}x{n}x{t}>) {{
  ^bb0(%v: {t}, %acc: {t}):
    %r = {add} %acc, %v : {t}
    linalg.yield %r : {t}
  }} -> tensor<{m}x{n}x{t}>
  %twice = linalg.generic {{indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}}
      ins(%s : tensor<{m}x{n}x{t}>) outs(%e2 : tensor<{m}x{n}x{t}>) {{
  ^bb0(%v: {t}, %o: {t}):
    %r = {add} %v, %v : {t}
    linalg.yield %r : {t}
  }} -> tensor<{m}x{n}x{t}>
  return %neg, %twice : tensor<{m}x{n}x{t}>, tensor<{m}x{n}x{t}>
}}
"""


@pytest.mark.parametrize("dtype", ["i32", "f32"])
@pytest.mark.parametrize("m,k,n", [(6, 2, 2), (5, 7, 19)])
def test_a_reduction_outside_the_lane_then_an_op_writing_its_buffer(cache_dir, dtype, m, k, n):
    """A reduction along a dim that is not the lane (an integer matmul, a sum over a middle dim) accumulates
    through its output buffer; when a later op of the fused group writes the same buffer (the two share one
    tensor.empty), the reduction must still read back its own partial sums, not the buffer's initial row
    (fuzzer seed 23 case 3502: only the last term was kept)."""
    integer = dtype == "i32"
    text = ACCUMULATE_THEN_OVERWRITE.format(m=m, k=k, n=n, t=dtype, zero="0" if integer else "0.0",
                                            sub="arith.subi" if integer else "arith.subf",
                                            add="arith.addi" if integer else "arith.addf")
    np_type = np.int32 if integer else np.float32
    a, b, x = (RNG.integers(-9, 9, shape).astype(np_type) for shape in ((m, k), (k, n), (m, k, n)))
    neg, twice = compile_library(text, cache_dir=cache_dir)["f"](a, b, x)
    np.testing.assert_allclose(neg, -(a @ b), rtol=1e-6)
    np.testing.assert_allclose(twice, 2 * x.sum(1), rtol=1e-6)


POWI = """
func.func @powi(%x: tensor<3x40xf32>, %n: tensor<3x40xi32>) -> tensor<5x3x40xf32> {{
  %e = tensor.empty() : tensor<5x3x40xf32>
  %r = linalg.generic {{indexing_maps = [affine_map<(p, i, j) -> (i, j)>, affine_map<(p, i, j) -> (i, j)>,
      affine_map<(p, i, j) -> (p, i, j)>], iterator_types = ["parallel", "parallel", "parallel"]}}
      ins(%x, %n : tensor<3x40xf32>, tensor<3x40xi32>) outs(%e : tensor<5x3x40xf32>) {{
  ^bb0(%a: f32, %k: i32, %o: f32):
    %p = linalg.index 0 : index
    %c2 = arith.constant 2 : i64
    %c3 = arith.constant 3 : i64
    %cm2 = arith.constant -2 : i64
    %c0 = arith.constant 0 : i64
    %sq = math.fpowi %a, %c2 : f32, i64
    %cu = math.fpowi %a, %c3 : f32, i64
    %inv = math.fpowi %a, %cm2 : f32, i64
    %one = math.fpowi %a, %c0 : f32, i64
    %any = math.fpowi %a, %k : f32, i32
    %pi = arith.index_cast %p : index to i32
    %i0 = arith.constant 0 : i32
    %i1 = arith.constant 1 : i32
    %i2 = arith.constant 2 : i32
    %i3 = arith.constant 3 : i32
    %is0 = arith.cmpi eq, %pi, %i0 : i32
    %is1 = arith.cmpi eq, %pi, %i1 : i32
    %is2 = arith.cmpi eq, %pi, %i2 : i32
    %is3 = arith.cmpi eq, %pi, %i3 : i32
    %s3 = arith.select %is3, %one, %any : f32
    %s2 = arith.select %is2, %inv, %s3 : f32
    %s1 = arith.select %is1, %cu, %s2 : f32
    %s0 = arith.select %is0, %sq, %s1 : f32
    linalg.yield %s0 : f32
  }} -> tensor<5x3x40xf32>
  return %r : tensor<5x3x40xf32>
}}
"""


def test_integer_powers_compile_ahead_of_time(cache_dir):
    """math.fpowi (torch's x ** 2 and its backward) in a vectorized body: LLVM's powi takes a scalar exponent
    only, so the kernel pipeline expands them first (math-expand-ops: constant exponents become
    multiplications, others math.powf); all equal numpy."""
    kernel = compile_library(POWI.format(), cache_dir=cache_dir)["powi"]
    x = (RNG.standard_normal((3, 40)) + 2.5).astype(np.float32)
    n = RNG.integers(-3, 4, (3, 40)).astype(np.int32)
    got = kernel(x, n)
    x64 = x.astype(np.float64)
    for index, want in enumerate([x64 ** 2, x64 ** 3, x64 ** -2.0, np.ones_like(x64), x64 ** n.astype(np.float64)]):
        np.testing.assert_allclose(got[index], want, rtol=2e-6)
