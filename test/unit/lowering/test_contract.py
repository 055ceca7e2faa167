"""Contractions compiled as packed GEMMs (`lowering/contract.py`) equal numpy's einsum.

Every operand layout (transposed A/B/C, batch dims anywhere, several M/N/K dims, attention's generics),
body forms (plain, scaled, a division fused into the A side), f32/f64, and shapes that are not
multiples of the register tile (8 x 32) or the cache blocks (edge tiles, partial panels, K remainders).
"""

import numpy as np
import pytest
from mlir import ir

from slicer.dialect import make_context
from slicer.lowering import DEFAULT_PIPELINE, compile_library, contract

RNG = np.random.default_rng(1)


def einsum_fn(name: str, spec: str, sizes: dict[str, int], dtype: str = "f32", scale: float | None = None) -> str:
    """A linalg.generic computing `spec` (e.g. "mk,kn->mn") on tensors, accumulating into zeros."""
    inputs, output = spec.split("->")
    operands = inputs.split(",")
    letters = sorted(set(inputs.replace(",", "")) | set(output), key=lambda ch: (ch in output and output.index(ch), ch))
    loops = list(output) + sorted(set(inputs.replace(",", "")) - set(output))
    dims = ", ".join(f"d{i}" for i in range(len(loops)))

    def amap(term):
        return f"affine_map<({dims}) -> ({', '.join(f'd{loops.index(ch)}' for ch in term)})>"

    def ttype(term):
        return f"tensor<{'x'.join(str(sizes[ch]) for ch in term)}x{dtype}>"

    kinds = ", ".join('"parallel"' if ch in output else '"reduction"' for ch in loops)
    args = ", ".join(f"%a{i}: {ttype(t)}" for i, t in enumerate(operands))
    scaled = (f"    %sc = arith.mulf %m, %scale : {dtype}\n", "%sc") if scale is not None else ("", "%m")
    del letters
    return f"""
func.func @{name}({args}) -> {ttype(output)} {{
  %z = arith.constant 0.0 : {dtype}
  %scale = arith.constant {scale or 1.0} : {dtype}
  %e = tensor.empty() : {ttype(output)}
  %f = linalg.fill ins(%z : {dtype}) outs(%e : {ttype(output)}) -> {ttype(output)}
  %r = linalg.generic {{indexing_maps = [{', '.join(amap(t) for t in operands + [output])}], iterator_types =
      [{kinds}]}}
      ins({', '.join(f'%a{i}' for i in range(len(operands)))} : {', '.join(ttype(t) for t in operands)})
          outs(%f : {ttype(output)}) {{
  ^bb0({', '.join(f'%x{i}: {dtype}' for i in range(len(operands)))}, %acc: {dtype}):
    %m = arith.mulf %x0, %x1 : {dtype}
{scaled[0]}    %s = arith.addf %acc, {scaled[1]} : {dtype}
    linalg.yield %s : {dtype}
  }} -> {ttype(output)}
  return %r : {ttype(output)}
}}
"""


CASES = [
    # spec, sizes: plain layouts, then permuted ones, batch dims, several dims per group
    ("mk,kn->mn", dict(m=37, k=41, n=75)),
    ("mk,nk->mn", dict(m=20, k=33, n=50)),
    ("km,kn->mn", dict(m=19, k=9, n=64)),
    ("km,nk->mn", dict(m=16, k=300, n=40)),
    ("mk,kn->nm", dict(m=45, k=17, n=12)),
    ("bmk,bkn->bmn", dict(b=3, m=10, k=7, n=33)),
    ("mbk,bkn->bmn", dict(b=2, m=9, k=16, n=40)),
    ("bmk,bkn->mbn", dict(b=3, m=8, k=5, n=32)),
    ("bmk,bkn->mnb", dict(b=5, m=9, k=6, n=7)),  # C's innermost dim is a batch dim: scratch tiles
    ("mab,abn->mn", dict(m=12, a=3, b=70, n=34)),  # two K dims (attention's output projection)
    ("sd,dhe->hse", dict(s=24, d=20, h=3, e=64)),  # attention's q/k/v projection: N = (h, e)
    ("sd,dhe->hse", dict(s=10, d=12, h=4, e=20)),  # ... with partial panels in every head
    ("hse,hte->hst", dict(h=2, s=17, e=16, t=40)),  # scores (B transposed)
    ("hst,hte->hse", dict(h=2, s=11, t=33, e=48)),  # p @ v
    ("hse,hed->sd", dict(h=4, s=9, e=64, d=40)),  # output projection: K = (h, e)
    ("mk,nk->mn", dict(m=33, k=64, n=70)),  # K-contiguous A and B: packed by in-register transposes
    ("mk,nk->mn", dict(m=20, k=512, n=40)),  # ... over several K blocks
    ("kn,mk->nm", dict(m=24, k=48, n=64)),
    ("mk,kn->mn", dict(m=1, k=1, n=1)),
    ("mk,kn->mn", dict(m=130, k=600, n=1100)),  # several cache blocks in every group, remainders
]


def _ids(case):
    spec, sizes = case
    return f"{spec}:{'_'.join(f'{k}{v}' for k, v in sizes.items())}"


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_einsum_contractions_equal_numpy(cache_dir, dtype):
    text = "\n".join(einsum_fn(f"c{i}", spec, sizes, dtype) for i, (spec, sizes) in enumerate(CASES))
    library = compile_library(text, cache_dir=cache_dir)
    np_dtype = np.float32 if dtype == "f32" else np.float64
    for i, (spec, sizes) in enumerate(CASES):
        inputs = spec.split("->")[0].split(",")
        arrays = [RNG.standard_normal([sizes[ch] for ch in term]).astype(np_dtype) for term in inputs]
        expected = np.einsum(spec, *[a.astype(np.float64) for a in arrays])
        tol = 1e-4 if dtype == "f32" else 1e-11
        np.testing.assert_allclose(library[f"c{i}"](*arrays), expected, rtol=tol, atol=tol * 10, err_msg=_ids(CASES[i]))


def test_a_long_contraction_sums_its_k_blocks_in_two_levels(cache_dir):
    """K = 4096 over K blocks of 256: each block summed from zero accumulators, then added to C (as BLAS does).
    One chain of 4096 additions (C loaded into the accumulators) has about 2.4x the rounding error of the
    two-level sum (sqrt(4096) / (sqrt(256) + sqrt(16))), which this bound rejects; numpy's float32 matmul
    (OpenBLAS, blocked alike) is the yardstick."""
    library = compile_library(einsum_fn("long", "mk,kn->mn", dict(m=64, k=4096, n=64)), cache_dir=cache_dir)
    rng = np.random.default_rng(7)
    a, b = (rng.standard_normal(shape).astype(np.float32) for shape in ((64, 4096), (4096, 64)))
    exact = a.astype(np.float64) @ b.astype(np.float64)

    def error(got):
        return np.linalg.norm(got - exact) / np.linalg.norm(exact)

    assert error(library["long"](a, b)) < 1.6 * error(a @ b)


def test_scaled_contraction_applies_the_scale_once(cache_dir):
    text = einsum_fn("scores", "hse,hte->hst", dict(h=3, s=21, e=19, t=35), scale=0.125)
    q = RNG.standard_normal((3, 21, 19), dtype=np.float32)
    k = RNG.standard_normal((3, 35, 19), dtype=np.float32)
    result = compile_library(text, cache_dir=cache_dir)["scores"](q, k)
    np.testing.assert_allclose(result, 0.125 * np.einsum("hse,hte->hst", q, k), rtol=1e-5, atol=1e-5)


FUSED_DIVISION = """
#p = affine_map<(h, s, e, t) -> (h, s, t)>
#d = affine_map<(h, s, e, t) -> (h, s)>
#v = affine_map<(h, s, e, t) -> (h, t, e)>
#o = affine_map<(h, s, e, t) -> (h, s, e)>
func.func @pv(%ex: tensor<2x13x37xf32>, %den: tensor<2x13xf32>, %v: tensor<2x37x40xf32>) -> tensor<2x13x40xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2x13x40xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<2x13x40xf32>) -> tensor<2x13x40xf32>
  %r = linalg.generic {indexing_maps = [#p, #d, #v, #o], iterator_types =
      ["parallel", "parallel", "parallel", "reduction"]}
      ins(%ex, %den, %v : tensor<2x13x37xf32>, tensor<2x13xf32>, tensor<2x37x40xf32>) outs(%f : tensor<2x13x40xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32, %acc: f32):
    %q = arith.divf %a, %b : f32
    %m = arith.mulf %q, %c : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<2x13x40xf32>
  return %r : tensor<2x13x40xf32>
}
"""


def test_a_division_fused_into_the_contraction_runs_while_packing(cache_dir):
    """softmax's `ex / den` fused into `p @ v` (linalg-fuse-elementwise-ops does this) is one side's factor."""
    ex = RNG.random((2, 13, 37), dtype=np.float32)
    den = RNG.random((2, 13), dtype=np.float32) + 1
    v = RNG.standard_normal((2, 37, 40), dtype=np.float32)
    result = compile_library(FUSED_DIVISION, cache_dir=cache_dir)["pv"](ex, den, v)
    np.testing.assert_allclose(result, np.einsum("hst,hte->hse", ex / den[:, :, None], v), rtol=1e-5, atol=1e-5)
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(FUSED_DIVISION)
        DEFAULT_PIPELINE.until("vectorize").run(module)
        text = str(module)
    assert "call @__slicer_contract_0" in text and "arith.divf" in text and "linalg.generic" not in text


def _classify(text: str) -> list[str]:
    from slicer.core.pipeline import run_pipeline

    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        DEFAULT_PIPELINE.until("bufferize").run(module)
        run_pipeline(module, "func.func(linalg-generalize-named-ops)")
        return contract.contract_module(module)


def test_classification_of_attention_generics():
    """Dim groups of attention's contractions (letters name loop dims in order): N = (h, e), K = (h, e) (outer
    first)."""
    q = _classify(einsum_fn("q", "sd,dhe->hse", dict(s=16, d=32, h=2, e=64)))
    assert q == ["@__slicer_contract_0: batch=- m=b n=ac k=d sizes=2x16x64x32 f32 zero-init"]
    out = _classify(einsum_fn("o", "hse,hed->sd", dict(s=16, d=32, h=2, e=64)))
    assert out == ["@__slicer_contract_0: batch=- m=a n=b k=dc sizes=16x32x64x2 f32 zero-init"]


def test_unit_dims_never_take_the_innermost_place_of_m_or_n(cache_dir):
    """An expert-parallel MoE's contraction (`[e, g, c, 1, d] x [e, d, 1, f]`, unit dims from its reshapes): a dim
    of extent 1 ties in C's strides with the dim inside it, and sorted innermost it took the micro-kernel's
    register tile (a tile of one row). Unit dims go outermost; the result is numpy's."""
    spec, sizes = "ecuk,ekvn->ecuvn", dict(e=2, c=16, u=1, k=32, v=1, n=64)
    assert _classify(einsum_fn("moe", spec, sizes)) == [
        "@__slicer_contract_0: batch=a m=cb n=de k=f sizes=2x16x1x1x64x32 f32 zero-init"]
    a = RNG.standard_normal((2, 16, 1, 32)).astype(np.float32)
    b = RNG.standard_normal((2, 32, 1, 64)).astype(np.float32)
    got = compile_library(einsum_fn("moe", spec, sizes), cache_dir=cache_dir)["moe"](a, b)
    np.testing.assert_allclose(got, np.einsum(spec, a.astype(np.float64), b), rtol=1e-4, atol=1e-3)


def test_non_contractions_are_left_to_the_vectorizer():
    """A max-plus 'contraction' or an integer one keeps the tile-and-vectorize path."""
    maxplus = einsum_fn("mp", "mk,kn->mn", dict(m=8, k=8, n=8)).replace("%s = arith.addf %acc, %m",
                                                                        "%s = arith.maximumf %acc, %m")
    assert _classify(maxplus) == []
    integer = einsum_fn("i", "mk,kn->mn", dict(m=8, k=8, n=8), "i32").replace("arith.mulf", "arith.muli").replace(
        "arith.addf", "arith.addi").replace("0.0 : i32", "0 : i32").replace("1.0 : i32", "1 : i32")
    assert _classify(integer) == []


@pytest.mark.slow
def test_large_outputs_written_once_are_right_with_and_without_alignment(cache_dir):
    """A 16 MiB C with K in one block takes non-temporal stores when its base is 64-byte aligned (a
    run-time check) and regular ones otherwise: both give the same result."""
    from slicer.lowering import aligned_empty

    kernel = compile_library(einsum_fn("wide", "mk,kn->mn", dict(m=2048, k=40, n=2048)), cache_dir=cache_dir)["wide"]
    a = RNG.standard_normal((2048, 40), dtype=np.float32)
    b = RNG.standard_normal((40, 2048), dtype=np.float32)
    expected = a.astype(np.float64) @ b
    aligned = aligned_empty((2048, 2048), np.float32)
    misaligned = np.empty(2048 * 2048 + 1, np.float32)[1:].reshape(2048, 2048)
    assert misaligned.ctypes.data % 64
    for out in (aligned, misaligned):
        kernel(a, b, out=out)
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


DOT_TO_SCALAR = """
func.func @dot(%a: tensor<3x7xf32>, %b: tensor<3x7xf32>) -> tensor<f32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<f32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<f32>) -> tensor<f32>
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>,
                                        affine_map<(i, j) -> ()>], iterator_types = ["reduction", "reduction"]}
      ins(%a, %b : tensor<3x7xf32>, tensor<3x7xf32>) outs(%f : tensor<f32>) {
  ^bb0(%x: f32, %y: f32, %acc: f32):
    %m = arith.mulf %x, %y : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<f32>
  return %r : tensor<f32>
}
"""


def test_a_product_summed_to_a_scalar_is_left_to_the_vectorizer(cache_dir):
    """Every loop a reduction, a 0-d output (a training step's gradient on a batch of one row, found by the
    fuzzer): not a GEMM, and no crash while classifying it."""
    assert _classify(DOT_TO_SCALAR) == []
    a, b = RNG.standard_normal((2, 3, 7), dtype=np.float32)
    got = compile_library(DOT_TO_SCALAR, cache_dir=cache_dir)["dot"](a, b)
    np.testing.assert_allclose(got, np.sum(a * b), rtol=1e-5)
