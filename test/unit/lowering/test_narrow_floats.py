"""bf16 (and f16) kernels compute in f32 (`lowering/narrow_floats.py`): each op's arithmetic and accumulation
in f32, each result rounded once to nearest even; roundings to bf16 as vector integer ops, so kernels built for
CPUs without AVX512-BF16 call no `__truncsfbf2`; row kernels (softmax, layernorm) read and write bf16 with
vector conversions, fused as in f32. References: float64 on the same bf16 inputs, rounded once where stated."""

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from mlir import ir

from slicer.core.pipeline import run_pipeline
from slicer.dialect import make_context
from slicer.lowering import DEFAULT_PIPELINE, compile_library
from slicer.lowering.aot import Target
from slicer.lowering.rows import rows_module

BF16 = np.dtype(ml_dtypes.bfloat16)
RNG = np.random.default_rng(7)
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
#: Kernels for this host, and for an AVX2 CPU without AVX512-BF16 (runs here too): both roundings tested.
TARGETS = [Target(), Target(cpu="x86-64-v3")]

PROGRAM = """
func.func @f(%x: tensor<8x1024xT>, %w: tensor<1024x32xT>) -> (tensor<8x32xT>, tensor<8xT>) {
  %zero = arith.constant 0.0 : T
  %e = tensor.empty() : tensor<8x32xT>
  %f = linalg.fill ins(%zero : T) outs(%e : tensor<8x32xT>) -> tensor<8x32xT>
  %h = linalg.matmul ins(%x, %w : tensor<8x1024xT>, tensor<1024x32xT>) outs(%f : tensor<8x32xT>) -> tensor<8x32xT>
  %g = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%h : tensor<8x32xT>) outs(%e : tensor<8x32xT>) {
  ^bb0(%v: T, %o: T):
    %t = math.tanh %v : T
    %r = arith.mulf %t, %v : T
    linalg.yield %r : T
  } -> tensor<8x32xT>
  %e2 = tensor.empty() : tensor<8xT>
  %f2 = linalg.fill ins(%zero : T) outs(%e2 : tensor<8xT>) -> tensor<8xT>
  %s = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>],
                       iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<8x1024xT>) outs(%f2 : tensor<8xT>) {
  ^bb0(%v: T, %o: T):
    %r = arith.addf %v, %o : T
    linalg.yield %r : T
  } -> tensor<8xT>
  return %g, %s : tensor<8x32xT>, tensor<8xT>
}
"""


def ulps(got: np.ndarray, want: np.ndarray, dtype) -> float:
    """The largest |got - want| in units of the last place of `dtype` at |want| (at least its smallest normal)."""
    want = np.asarray(want, np.float64)
    info = np.finfo(dtype)
    unit = np.maximum(np.abs(want), float(info.smallest_normal)) * float(info.eps)
    return float(np.max(np.abs(np.asarray(got, np.float64) - want) / unit))


@pytest.mark.parametrize("target", TARGETS, ids=["native", "no-avx512bf16"])
def test_matmul_elementwise_and_sum_in_bf16_round_once(cache_dir, target):
    library = compile_library(PROGRAM.replace("T", "bf16"), target=target, cache_dir=cache_dir)
    x = RNG.standard_normal((8, 1024)).astype(BF16)
    x[0] = 1.0  # a sum of 1024 ones: 1024 in f32, but 256 if accumulated in bf16 (256 + 1 rounds to 256)
    w = (RNG.standard_normal((1024, 32)) / 32).astype(BF16)
    g, s = library["f"](x, w)
    assert g.dtype == BF16 and s.dtype == BF16 and float(s[0]) == 1024.0
    # %h is the f32 sum rounded once: the bf16 nearest the exact product, or (an f32 sum within an f32 rounding
    # of a bf16 rounding boundary) its neighbour on the exact value's side. Each %g element is f32 arithmetic on
    # one of the two, rounded once: within one unit of it.
    exact = x.astype(np.float64) @ w.astype(np.float64)
    nearest = exact.astype(BF16)
    other = np.nextafter(nearest, np.where(exact > nearest.astype(np.float64), np.inf, -np.inf).astype(BF16))
    candidates = [h.astype(np.float64) for h in (nearest, other)]
    errors = [np.abs(g.astype(np.float64) - np.tanh(h) * h) / (np.maximum(np.abs(np.tanh(h) * h),
              float(np.finfo(BF16).smallest_normal)) * float(np.finfo(BF16).eps)) for h in candidates]
    assert np.minimum(*errors).max() <= 1.0
    assert ulps(s, x.astype(np.float64).sum(1), BF16) <= 0.5 + 2 ** -8  # f32 sum of 1024 terms, rounded once


def test_f16_computes_in_f32_too(cache_dir):
    library = compile_library(PROGRAM.replace("T", "f16"), cache_dir=cache_dir)
    x = RNG.standard_normal((8, 1024)).astype(np.float16)
    x[0] = 1.0  # 1024 ones: exact in f32; in f16 the sum would be exact too, so also check the rounding
    w = (RNG.standard_normal((1024, 32)) / 32).astype(np.float16)
    g, s = library["f"](x, w)
    h = (x.astype(np.float64) @ w.astype(np.float64)).astype(np.float16).astype(np.float64)
    assert g.dtype == np.float16 and ulps(g, np.tanh(h) * h, np.float16) <= 1.0
    assert float(s[0]) == 1024.0 and ulps(s, x.astype(np.float64).sum(1), np.float16) <= 0.5 + 2 ** -8


@pytest.mark.parametrize("target", TARGETS, ids=["native", "no-avx512bf16"])
def test_f64_rounds_to_bf16_exactly(cache_dir, target):
    """f64 -> bf16 through f32 rounded to odd: no double rounding, even at ties f32 would break."""
    text = """
func.func @r(%x: tensor<64xf64>) -> tensor<64xbf16> {
  %e = tensor.empty() : tensor<64xbf16>
  %g = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>], iterator_types = ["parallel"]}
      ins(%x : tensor<64xf64>) outs(%e : tensor<64xbf16>) {
  ^bb0(%v: f64, %o: bf16):
    %t = arith.truncf %v : f64 to bf16
    linalg.yield %t : bf16
  } -> tensor<64xbf16>
  return %g : tensor<64xbf16>
}"""
    library = compile_library(text, target=target, cache_dir=cache_dir)
    tie = 1 + 2.0 ** -8
    special = [tie + 2.0 ** -30, tie - 2.0 ** -30, -(tie + 2.0 ** -30), tie, 1 + 3 * 2.0 ** -8, np.inf, -np.inf,
               np.nan, 0.0, -0.0, 1e300, -1e300, 1e-300, 3.4e38, 3.39e38]
    x = np.concatenate([special, RNG.standard_normal(64 - len(special)) * 10.0 ** RNG.integers(-30, 30, 64 - 15)])
    with np.errstate(over="ignore"):
        want = x.astype(BF16)
    assert np.array_equal(library["r"](x).view(np.uint16), want.view(np.uint16))


@pytest.mark.parametrize("name", ["softmax", "layernorm"])
def test_row_kernels_read_and_write_bf16_fused_as_in_f32(cache_dir, name):
    text = (EXAMPLES / f"{name}.mlir").read_text()
    text = (text.replace("8x16", "6x200").replace("tensor<8xf32>", "tensor<6xf32>").replace("tensor<16xf32>",
            "tensor<200xf32>").replace("16.0 : f32", "200.0 : f32").replace("f32", "bf16"))
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        DEFAULT_PIPELINE.until("bufferize").run(module)
        run_pipeline(module, "func.func(linalg-generalize-named-ops)")
        assert rows_module(module) == ["@__slicer_rows_0: 6 op(s), 1 row dim(s)"]  # as in f32 (test_rows.py)
        assert "vector<16xf32> to vector<16xbf16>" in str(module)  # rounded as vectors
    library = compile_library(text, cache_dir=cache_dir)
    x = (RNG.standard_normal((6, 200)) * 4).astype(BF16)
    x64 = x.astype(np.float64)
    if name == "softmax":
        e = np.exp(x64 - x64.max(1, keepdims=True))
        got, want = library[name](x), e / e.sum(1, keepdims=True)
    else:
        gamma, beta = RNG.standard_normal(200).astype(BF16), RNG.standard_normal(200).astype(BF16)
        mean = x64.mean(1, keepdims=True)
        want = ((x64 - mean) / np.sqrt(((x64 - mean) ** 2).mean(1, keepdims=True) + 1e-5) * gamma.astype(np.float64)
                + beta.astype(np.float64))
        got = library[name](x, gamma, beta)
    assert got.dtype == BF16
    # intermediates the program types as bf16 (the row sum, the mean) are rounded there: a few units
    assert np.max(np.abs(got.astype(np.float64) - want)) <= 4 * 2.0 ** -8 * np.max(np.abs(want))


@pytest.mark.parametrize("avx512bf16", [None, False, True])
def test_roundings_are_left_to_llvm_only_for_avx512bf16_targets(avx512bf16):
    """The AOT compiler marks a module whose target has AVX512-BF16 (one `vcvtneps2bf16` per 16 lanes); any other
    module gets the portable integer expansion. f64 -> bf16 goes through f32 (rounded to odd) either way."""
    from slicer.core.names import TARGET_AVX512_BF16_ATTR
    from slicer.lowering.narrow_floats import expand_bf16_truncation
    text = """
func.func @r(%v: vector<16xf32>, %d: f64) -> (vector<16xbf16>, bf16) {
  %r = arith.truncf %v : vector<16xf32> to vector<16xbf16>
  %s = arith.truncf %d : f64 to bf16
  return %r, %s : vector<16xbf16>, bf16
}"""
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        if avx512bf16 is not None:
            module.operation.attributes[TARGET_AVX512_BF16_ATTR] = ir.BoolAttr.get(avx512bf16)
        expand_bf16_truncation(module)
        out = str(module)
    assert "f64 to bf16" not in out and "f64 to f32" in out
    assert ("vector<16xf32> to vector<16xbf16>" in out) == bool(avx512bf16)


@pytest.mark.parametrize("target", TARGETS, ids=["native", "no-avx512bf16"])
def test_scalar_bf16_arithmetic_outside_linalg_is_f32_too(cache_dir, target):
    """Scalars read with tensor.extract and multiplied outside any linalg op: upstream's per-instruction
    widening (`arith-emulate-unsupported-floats`, `math-extend-to-supported-types`), no call of __truncsfbf2."""
    text = """
func.func @s(%x: tensor<4xbf16>) -> tensor<2xbf16> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %a = tensor.extract %x[%c0] : tensor<4xbf16>
  %b = tensor.extract %x[%c1] : tensor<4xbf16>
  %p = arith.mulf %a, %b : bf16
  %e = math.exp %a : bf16
  %t = tensor.from_elements %p, %e : tensor<2xbf16>
  return %t : tensor<2xbf16>
}"""
    library = compile_library(text, target=target, cache_dir=cache_dir)
    x = np.array([1.5, 1.0 + 2 ** -7, 3, 4], BF16)
    wide = x.astype(np.float32)
    want = np.array([wide[0] * wide[1], np.exp(wide[0])], np.float32).astype(BF16)
    assert np.array_equal(library["s"](x).view(np.uint16), want.view(np.uint16))


def _transpose(name: str, shape: tuple[int, ...], perm: tuple[int, ...], element: str) -> str:
    """`@name`: out = in.transpose(perm) as a moves-only linalg.generic, in `element`."""
    dims = [f"d{i}" for i in range(len(shape))]
    out = [shape[p] for p in perm]
    source = [""] * len(shape)
    for i, p in enumerate(perm):
        source[p] = dims[i]
    t_in = f"tensor<{'x'.join(map(str, shape))}x{element}>"
    t_out = f"tensor<{'x'.join(map(str, out))}x{element}>"
    return f"""
func.func @{name}(%a: {t_in}) -> {t_out} {{
  %e = tensor.empty() : {t_out}
  %r = linalg.generic {{indexing_maps = [affine_map<({', '.join(dims)}) -> ({', '.join(source)})>,
                                        affine_map<({', '.join(dims)}) -> ({', '.join(dims)})>],
                       iterator_types = [{', '.join(['"parallel"'] * len(shape))}]}}
      ins(%a : {t_in}) outs(%e : {t_out}) {{
  ^bb0(%in: {element}, %out: {element}):
    linalg.yield %in : {element}
  }} -> {t_out}
  return %r : {t_out}
}}"""


#: Odd-sized narrow-float transposes; the first is an input gradient's phases that aborted LLVM when its
#: shuffles moved bf16 (lit: slicer-kernel-narrow-moves.mlir).
TRANSPOSES = [("phases", (2, 2, 2, 16, 9, 9), (2, 3, 4, 0, 5, 1)), ("odd3", (3, 5, 7), (2, 0, 1)),
              ("odd2", (9, 17), (1, 0)), ("pairs", (5, 3, 2), (1, 0, 2))]


@pytest.mark.parametrize("target", TARGETS, ids=["native", "no-avx512bf16"])
def test_odd_narrow_transposes_compile_and_move_bits_exactly(cache_dir, target):
    """bf16 and f16 transposes of odd extents through the whole pipeline (vectorized shuffles moved as i16),
    bit for bit numpy's, NaN payloads and negative zeros included."""
    text = "\n".join(_transpose(f"{name}_{element}", shape, perm, element)
                     for name, shape, perm in TRANSPOSES for element in ("bf16", "f16"))
    library = compile_library(text, target=target, cache_dir=cache_dir)
    for name, shape, perm in TRANSPOSES:
        for element, dtype in (("bf16", BF16), ("f16", np.dtype(np.float16))):
            bits = RNG.integers(0, 1 << 16, size=shape, dtype=np.uint16)  # every pattern: NaNs, -0, subnormals
            got = library[f"{name}_{element}"](bits.view(dtype))
            assert got.dtype == dtype and np.array_equal(got.view(np.uint16), bits.transpose(perm)), (name, element)
