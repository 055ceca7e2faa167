"""Contractions of bf16 operands (`lowering/contract/bf16_gemm.py`) on each path, forced: equal to float32 numpy.

The reference is numpy's float64 einsum of the bf16 inputs (exact products; the kernels accumulate in f32).
Tolerance: an f32 result is within 1e-5 of sum |a||b| (f32 accumulation of K products: K * 2^-24 relative
at worst for the K here, ~1e-5); a bf16 result additionally within one bf16 rounding (2^-8 of its value).
Every layout the packing handles (A along k, B along N, B along k, transposed A, several M/N/K dims, a C whose
innermost dim is not N, A read in place where N is small), batch dims, edge sizes that are not multiples of the tiles (8
or 32 rows, 32 columns, k pairs, 32-deep AMX steps) and more than one cache block (K > 512, N > 1024, M > 256).

AMX code runs only on a CPU that has it (this test checks that it compiles to tile instructions
everywhere and that loading it elsewhere is refused clearly instead of a SIGILL).
"""

import shutil
import subprocess

import ml_dtypes
import numpy as np
import pytest
from mlir import ir

from slicer.core.errors import KernelError
from slicer.core.functions import entry_function
from slicer.core.names import TARGET_BF16_UNITS_ATTR
from slicer.core.pipeline import run_pipeline
from slicer.dialect import make_context
from slicer.lowering import DEFAULT_PIPELINE, compile_library
from slicer.lowering.aot import Target, library_key
from slicer.lowering.cache import KernelCache
from slicer.lowering.contract import ContractOptions, contract_module
from slicer.lowering.contract.matrix_units import AMX, AVX512BF16, BF16_UNITS, F32, host_units, units_of_flags
from slicer.lowering.kernel_prepare import prepare_kernels

RNG = np.random.default_rng(3)
BF16 = ml_dtypes.bfloat16
HOST = host_units()


def bf16_einsum_fn(name: str, spec: str, sizes: dict[str, int], out: str = "f32") -> str:
    """A linalg.generic computing `spec` on bf16 tensors into an `out` tensor of zeros: the operands widened
    by `arith.extf` for an f32 C (what torch-mlir imports for a matmul with f32 accumulation), as they are
    for a bf16 C."""
    inputs, output = spec.split("->")
    operands = inputs.split(",")
    loops = list(output) + sorted(set(inputs.replace(",", "")) - set(output))
    dims = ", ".join(f"d{i}" for i in range(len(loops)))

    def amap(term):
        return f"affine_map<({dims}) -> ({', '.join(f'd{loops.index(ch)}' for ch in term)})>"

    def ttype(term, t="bf16"):
        return f"tensor<{'x'.join(str(sizes[ch]) for ch in term)}x{t}>"

    kinds = ", ".join('"parallel"' if ch in output else '"reduction"' for ch in loops)
    args = ", ".join(f"%a{i}: {ttype(t)}" for i, t in enumerate(operands))
    if out == "f32":
        body = ("    %w0 = arith.extf %x0 : bf16 to f32\n    %w1 = arith.extf %x1 : bf16 to f32\n"
                "    %m = arith.mulf %w0, %w1 : f32\n")
    else:
        body = "    %m = arith.mulf %x0, %x1 : bf16\n"
    return f"""
func.func @{name}({args}) -> {ttype(output, out)} {{
  %z = arith.constant 0.0 : {out}
  %e = tensor.empty() : {ttype(output, out)}
  %f = linalg.fill ins(%z : {out}) outs(%e : {ttype(output, out)}) -> {ttype(output, out)}
  %r = linalg.generic {{indexing_maps = [{', '.join(amap(t) for t in operands + [output])}], iterator_types =
      [{kinds}]}}
      ins(%a0, %a1 : {', '.join(ttype(t) for t in operands)}) outs(%f : {ttype(output, out)}) {{
  ^bb0(%x0: bf16, %x1: bf16, %acc: {out}):
{body}    %s = arith.addf %acc, %m : {out}
    linalg.yield %s : {out}
  }} -> {ttype(output, out)}
  return %r : {ttype(output, out)}
}}
"""


CASES = [
    ("mk,kn->mn", dict(m=37, k=41, n=75)),  # A along k, B along N; edges everywhere, k odd
    ("mk,nk->mn", dict(m=20, k=33, n=50)),  # B along k (a Linear layer's [out, in] weight)
    ("km,kn->mn", dict(m=19, k=9, n=64)),  # A transposed: element by element
    ("mk,kn->nm", dict(m=45, k=17, n=12)),  # C's innermost dim is M: scratch tiles
    ("bmk,bkn->bmn", dict(b=3, m=10, k=7, n=33)),  # batch matmul
    ("hse,hte->hst", dict(h=2, s=17, e=16, t=40)),  # attention scores (B along k)
    ("sd,dhe->hse", dict(s=24, d=20, h=3, e=64)),  # N = (h, e)
    ("hse,hed->sd", dict(h=4, s=9, e=64, d=40)),  # K = (h, e): packed in runs along e, one per h
    ("hse,hed->sd", dict(h=12, s=40, e=64, d=64)),  # ... over two K blocks of 8 and 4 h's
    ("mab,abn->mn", dict(m=12, a=3, b=7, n=34)),  # K = (a, b), odd runs: B's pairs straddle them
    ("mk,kn->mn", dict(m=1, k=1, n=1)),
    ("mk,kn->mn", dict(m=64, k=64, n=64)),  # whole tiles of every path
    ("mk,kn->mn", dict(m=300, k=1100, n=1060)),  # several M, N and K blocks, remainders
    ("km,nk->mn", dict(m=70, k=600, n=90)),  # both transposed in registers, two K blocks, remainders
    ("mk,kn->mn", dict(m=45, k=1030, n=100)),  # A read in place (N small): K blocks of run-time depth, edge rows
]
BF16_C_CASES = [
    ("mk,kn->mn", dict(m=37, k=41, n=75)),
    ("mk,nk->mn", dict(m=64, k=96, n=64)),
    ("bmk,bkn->bmn", dict(b=2, m=33, k=70, n=40)),
    ("mk,kn->nm", dict(m=45, k=17, n=12)),  # C's innermost dim is M: element by element through the scratch
]


def _pipeline(units: str, rows: int = 8):
    return DEFAULT_PIPELINE.with_options("slicer-kernel-contract", bf16_units=units, mr=rows)


def _inputs(spec: str, sizes: dict[str, int]) -> list[np.ndarray]:
    return [RNG.standard_normal([sizes[ch] for ch in term]).astype(BF16) for term in spec.split("->")[0].split(",")]


def _check(result: np.ndarray, spec: str, arrays: list[np.ndarray], rounding: float, label: str) -> None:
    wide = [a.astype(np.float64) for a in arrays]
    exact = np.einsum(spec, *wide)
    scale = np.einsum(spec, *[np.abs(w) for w in wide])
    error = np.abs(result.astype(np.float64) - exact)
    bound = 1e-5 * scale + rounding * np.abs(exact)
    assert (error <= bound).all(), f"{label}: worst error {float((error - bound).max()):.3g} past its bound"


def _run_cases(units: str, cases, out: str, cache_dir, rows: int = 8) -> None:
    text = "\n".join(bf16_einsum_fn(f"c{i}", spec, sizes, out) for i, (spec, sizes) in enumerate(cases))
    library = compile_library(text, pipeline=_pipeline(units, rows), cache_dir=cache_dir)
    assert library.meta["amx"] == (units == AMX)
    for i, (spec, sizes) in enumerate(cases):
        arrays = _inputs(spec, sizes)
        result = library[f"c{i}"](*arrays)
        assert result.dtype == (np.float32 if out == "f32" else BF16)
        _check(result, spec, arrays, 0.0 if out == "f32" else 2.0 ** -8, f"{units} {out} {spec} {sizes}")


RUNNABLE = BF16_UNITS[BF16_UNITS.index(HOST):]
"""The units this CPU can run (BF16_UNITS: fastest first). The others' kernels would stop the test process with
SIGILL, so the tests of those units are skipped here, saying which units the CPU has; an AMX host runs them all
(this repository's machine, an AMD EPYC, has no AMX: test_amx_code_is_tile_instructions_and_needs_the_tile_state checks
the AMX code without running it)."""


@pytest.mark.slow
@pytest.mark.parametrize("units", [AMX, AVX512BF16, F32])
def test_bf16_contractions_into_f32_equal_numpy(cache_dir, units):
    if units not in RUNNABLE:
        pytest.skip(f"this CPU has no {units} (its best bf16 units: {HOST})")
    _run_cases(units, CASES, "f32", cache_dir)


@pytest.mark.parametrize("units", [AMX, AVX512BF16, F32])
def test_bf16_contractions_into_bf16_round_once(cache_dir, units):
    if units not in RUNNABLE:
        pytest.skip(f"this CPU has no {units} (its best bf16 units: {HOST})")
    _run_cases(units, BF16_C_CASES, "bf16", cache_dir)


@pytest.mark.slow
def test_32_row_tiles_pack_and_drive_as_amx_does(cache_dir):
    """The vector kernels at AMX's tile rows (`mr=32`): the packing of 32-row A tiles (two 16-row transposes
    each), 32-row edge tiles and 32 x 32 C views that the AMX kernels use, checked on any CPU."""
    _run_cases(F32, CASES[:8], "f32", cache_dir, rows=32)


def test_amx_code_is_tile_instructions_and_needs_the_tile_state(cache_dir):
    """Compiled for an AMX CPU: the micro-kernel is tdpbf16ps on tiles LLVM configures (ldtilecfg); this
    process asks Linux for the tile state when it loads the kernels, and a CPU without AMX refuses it with a
    KernelError that says what to do (instead of the SIGILL the first tile instruction would raise)."""
    text = bf16_einsum_fn("mm", "mk,kn->mn", dict(m=64, k=96, n=64))
    # K prime: K blocks of a run-time depth, the micro-kernel with its loop of step groups
    text += bf16_einsum_fn("prime", "mk,nk->mn", dict(m=40, k=1031, n=70))
    target = Target(cpu="sapphirerapids")
    try:
        library = compile_library(text, target=target, cache_dir=cache_dir)
    except KernelError as error:
        assert "Linux refused the tile state" in str(error) and "bf16-units=avx512bf16" in str(error)
        assert HOST != AMX
    else:
        assert HOST == AMX
        for name, spec, sizes in (("mm", "mk,kn->mn", dict(m=64, k=96, n=64)),
                                  ("prime", "mk,nk->mn", dict(m=40, k=1031, n=70))):
            arrays = _inputs(spec, sizes)
            _check(library[name](*arrays), spec, arrays, 0.0, f"amx {name}")
    objdump = shutil.which("objdump")
    if objdump is None:
        return
    entry = KernelCache(cache_dir).lookup(library_key(text, DEFAULT_PIPELINE, target))
    code = _disassembly(objdump, entry.library)
    assert all(f"\t{instruction} " in code for instruction in ("ldtilecfg", "tileloadd", "tdpbf16ps", "tilestored"))


def _disassembly(objdump: str, path) -> str:
    return subprocess.run([objdump, "-d", "--no-show-raw-insn", str(path)], capture_output=True, text=True).stdout


def test_a_target_without_avx512_takes_the_f32_path(cache_dir):
    """AVX2 only (x86-64-v3): `auto` picks the f32 kernel, 16-lane vectors LLVM splits into ymm halves."""
    spec, sizes = "mk,nk->mn", dict(m=37, k=70, n=45)
    library = compile_library(bf16_einsum_fn("mm", spec, sizes), target=Target(cpu="x86-64-v3"), cache_dir=cache_dir)
    arrays = _inputs(spec, sizes)
    _check(library["mm"](*arrays), spec, arrays, 0.0, "x86-64-v3")
    assert "bf16_f32_8x32" in _after_contract(bf16_einsum_fn("mm", spec, sizes), units="auto", target="f32")


def test_forcing_units_the_target_lacks_is_refused(cache_dir):
    text = bf16_einsum_fn("mm", "mk,kn->mn", dict(m=16, k=16, n=16))
    with pytest.raises(KernelError, match="bf16-units=amx but the target has only f32"):
        compile_library(text, pipeline=_pipeline(AMX), target=Target(cpu="x86-64-v3"), cache_dir=cache_dir)


def test_the_best_units_of_a_target():
    assert Target(cpu="sapphirerapids").bf16_units() == AMX
    assert Target(cpu="znver4").bf16_units() == AVX512BF16
    assert Target(cpu="skylake-avx512").bf16_units() == F32
    assert Target(cpu="sapphirerapids", features="-amx-bf16").bf16_units() == AVX512BF16
    assert units_of_flags({"amx_bf16", "amx_tile", "avx512_bf16"}) == AMX
    assert units_of_flags({"avx512f"}) == F32


def test_a_scaled_bf16_contraction_takes_the_f32_gemm(cache_dir):
    """A side that is more than a bf16 input (attention's scores scaled inside the body) is not packed as bf16
    (rounding the scaled operand to bf16 would lose precision): the f32 GEMM widens it while packing."""
    text = (
        bf16_einsum_fn("scores", "hse,hte->hst", dict(h=2, s=17, e=40, t=33))
        .replace(
            "    %s = arith.addf %acc, %m : f32",
            "    %ms = arith.mulf %m, %c8 : f32\n    %s = arith.addf %acc, %ms : f32",
        )
        .replace(
            "  %z = arith.constant 0.0 : f32", "  %z = arith.constant 0.0 : f32\n  %c8 = arith.constant 0.125 : f32"
        )
    )
    generated = _after_contract(text)
    assert "__slicer_ukernel_f32_8x2" in generated and "bf16_" not in generated
    library = compile_library(text, cache_dir=cache_dir)
    arrays = _inputs("hse,hte->hst", dict(h=2, s=17, e=40, t=33))
    result = library["scores"](*arrays)
    _check(result / 0.125, "hse,hte->hst", arrays, 0.0, "scaled scores")


def _after_contract(text: str, units: str = "auto", target: str | None = None) -> str:
    """The module after the kernel pipeline up to the contraction pass (for a target with `target` bf16 units)."""
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        if target is not None:
            module.operation.attributes[TARGET_BF16_UNITS_ATTR] = ir.StringAttr.get(target)
        prepare_kernels(module, [entry_function(module, None)])
        DEFAULT_PIPELINE.until("bufferize").run(module)
        run_pipeline(module, "func.func(linalg-generalize-named-ops)")
        contract_module(module, ContractOptions(bf16_units=units))
        return str(module)


def test_an_f32_times_bf16_contraction_takes_the_f32_gemm(cache_dir):
    """One side f32 (rare: a bf16 activation times an f32 weight): nothing is rounded to bf16, the f32 GEMM
    widens the bf16 side while packing."""
    spec, sizes = "mk,kn->mn", dict(m=21, k=50, n=40)
    text = bf16_einsum_fn("mixed", spec, sizes).replace("tensor<50x40xbf16>", "tensor<50x40xf32>").replace(
        "%x1: bf16", "%x1: f32").replace("    %w1 = arith.extf %x1 : bf16 to f32\n", "").replace("%w0, %w1", "%w0, %x1")
    assert "__slicer_ukernel_f32_8x2" in _after_contract(text)
    a = _inputs(spec, sizes)[0]
    b = RNG.standard_normal((50, 40)).astype(np.float32)
    result = compile_library(text, cache_dir=cache_dir)["mixed"](a, b)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    assert (np.abs(result - exact) <= 1e-5 * scale).all()


@pytest.mark.parametrize("units", [AVX512BF16, F32])
def test_a_large_c_written_once_is_stored_non_temporally(cache_dir, units):
    """Attention's scores at 4 heads of 1024 x 1024 (16 MiB of f32 C, K = 64 in one block): the vector
    kernels store each tile once with non-temporal stores (no read of C's lines first)."""
    if units not in RUNNABLE:  # the instructions would fault on this CPU; the lit tests check their code
        pytest.skip(f"this CPU has no {units}")
    spec, sizes = "hse,hte->hst", dict(h=4, s=1024, e=64, t=1024)
    text = bf16_einsum_fn("scores", spec, sizes)
    assert "nontemporal = true" in _after_contract(text, units=units)
    q, k = _inputs(spec, sizes)
    result = compile_library(text, pipeline=_pipeline(units), cache_dir=cache_dir)["scores"](q, k)
    wide_q, wide_k = q.astype(np.float32), k.astype(np.float32)
    exact = np.matmul(wide_q, wide_k.transpose(0, 2, 1))
    scale = np.matmul(np.abs(wide_q), np.abs(wide_k).transpose(0, 2, 1))
    assert (np.abs(result - exact) <= 1e-5 * scale + 1e-6).all()


SHARED_WIDENING = """
#id = affine_map<(i, j) -> (i, j)>
#a = affine_map<(i, j, k) -> (i, k)>
#b = affine_map<(i, j, k) -> (k, j)>
#c = affine_map<(i, j, k) -> (i, j)>
func.func @two(%x: tensor<21x50xbf16>, %w: tensor<50x40xbf16>, %v: tensor<50x40xbf16>)
    -> (tensor<21x40xf32>, tensor<21x40xf32>) {
  %zero = arith.constant 0.0 : f32
  %ew = tensor.empty() : tensor<21x50xf32>
  %wide = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<21x50xbf16>) outs(%ew : tensor<21x50xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %f = arith.extf %in : bf16 to f32
    linalg.yield %f : f32
  } -> tensor<21x50xf32>
  %ec = tensor.empty() : tensor<21x40xf32>
  %fill = linalg.fill ins(%zero : f32) outs(%ec : tensor<21x40xf32>) -> tensor<21x40xf32>
  %p = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%wide, %w : tensor<21x50xf32>, tensor<50x40xbf16>) outs(%fill : tensor<21x40xf32>) {
  ^bb0(%in: f32, %in2: bf16, %out: f32):
    %b = arith.extf %in2 : bf16 to f32
    %m = arith.mulf %in, %b : f32
    %s = arith.addf %out, %m : f32
    linalg.yield %s : f32
  } -> tensor<21x40xf32>
  %q = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%wide, %v : tensor<21x50xf32>, tensor<50x40xbf16>) outs(%fill : tensor<21x40xf32>) {
  ^bb0(%in: f32, %in2: bf16, %out: f32):
    %b = arith.extf %in2 : bf16 to f32
    %m = arith.mulf %in, %b : f32
    %s = arith.addf %out, %m : f32
    linalg.yield %s : f32
  } -> tensor<21x40xf32>
  return %p, %q : tensor<21x40xf32>, tensor<21x40xf32>
}
"""


def test_a_bf16_operand_widened_once_for_several_contractions_takes_the_bf16_gemm(cache_dir):
    """torch's import widens a layer norm's bf16 output once and reads it from q, k and v: the widening is
    folded into each contraction (`lowering/widenings.py`), which reads bf16 and takes the bf16 GEMM; the
    results equal numpy's on the bf16 values (f32 accumulation)."""
    generated = _after_contract(SHARED_WIDENING, units=AVX512BF16 if AVX512BF16 in RUNNABLE else F32)
    assert "__slicer_ukernel_bf16_" in generated and "__slicer_ukernel_f32_8x2" not in generated
    spec = "mk,kn->mn"
    x, w = _inputs(spec, dict(m=21, k=50, n=40))
    v = _inputs(spec, dict(m=21, k=50, n=40))[1]
    p, q = compile_library(SHARED_WIDENING, cache_dir=cache_dir)["two"](x, w, v)
    _check(p, spec, [x, w], 0.0, "first reader")
    _check(q, spec, [x, v], 0.0, "second reader")


def _context_program(also_return_c: bool, k: int = 40) -> str:
    """attention's context `p @ v` into f32, rounded to bf16 and transposed to [b, s, h, e]; optionally C
    returned too (a second reader: the rounding is not fused)."""
    results = "tensor<2x32x4x64xbf16>" + (", tensor<2x4x32x64xf32>" if also_return_c else "")
    returned = "%r" + (", %c" if also_return_c else "")
    return f"""
#a = affine_map<(b, h, s, e, t) -> (b, h, s, t)>
#v = affine_map<(b, h, s, e, t) -> (b, h, t, e)>
#c = affine_map<(b, h, s, e, t) -> (b, h, s, e)>
#id = affine_map<(b, s, h, e) -> (b, s, h, e)>
#tr = affine_map<(b, s, h, e) -> (b, h, s, e)>
func.func @ctx(%p: tensor<2x4x32x{k}xbf16>, %v: tensor<2x4x{k}x64xbf16>) -> ({results}) {{
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2x4x32x64xf32>
  %fill = linalg.fill ins(%zero : f32) outs(%e : tensor<2x4x32x64xf32>) -> tensor<2x4x32x64xf32>
  %c = linalg.generic {{indexing_maps = [#a, #v, #c], iterator_types =
      ["parallel", "parallel", "parallel", "parallel", "reduction"]}}
      ins(%p, %v : tensor<2x4x32x{k}xbf16>, tensor<2x4x{k}x64xbf16>) outs(%fill : tensor<2x4x32x64xf32>) {{
  ^bb0(%x: bf16, %y: bf16, %out: f32):
    %xf = arith.extf %x : bf16 to f32
    %yf = arith.extf %y : bf16 to f32
    %m = arith.mulf %xf, %yf : f32
    %s = arith.addf %out, %m : f32
    linalg.yield %s : f32
  }} -> tensor<2x4x32x64xf32>
  %eo = tensor.empty() : tensor<2x32x4x64xbf16>
  %r = linalg.generic {{indexing_maps = [#tr, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}}
      ins(%c : tensor<2x4x32x64xf32>) outs(%eo : tensor<2x32x4x64xbf16>) {{
  ^bb0(%x: f32, %o: bf16):
    %t = arith.truncf %x : f32 to bf16
    linalg.yield %t : bf16
  }} -> tensor<2x32x4x64xbf16>
  return {returned} : {results}
}}
"""


@pytest.mark.parametrize("units", [AVX512BF16, F32])
@pytest.mark.parametrize("k", [40, 512, 600])
def test_the_rounding_epilogue_is_stored_by_the_gemm_bit_for_bit(cache_dir, units, k):
    """A contraction whose f32 C only a (transposing) rounding reads: the bf16 GEMM stores the rounded tiles
    where the rounding did (`contract/epilogue.py`), no f32 C left, the same bits as the f32 C rounded by its
    own op (the program that also returns C keeps both); K longer than one K block (600 > 512) is not fused."""
    if units not in RUNNABLE:  # the instructions would fault on this CPU; the lit tests check their code
        pytest.skip(f"this CPU has no {units}")
    fused = k <= 512
    generated = _after_contract(_context_program(False, k), units=units)
    assert ("call @__slicer_contract_0(%arg0, %arg1, %arg2)" in generated) == fused  # into the bf16 result
    rng = np.random.default_rng(k)
    p = rng.standard_normal((2, 4, 32, k)).astype(BF16)
    v = rng.standard_normal((2, 4, k, 64)).astype(BF16)
    alone = compile_library(_context_program(False, k), pipeline=_pipeline(units), cache_dir=cache_dir)["ctx"](p, v)
    rounded, c = compile_library(_context_program(True, k), pipeline=_pipeline(units), cache_dir=cache_dir)["ctx"](p, v)
    assert alone.dtype == BF16 and alone.shape == (2, 32, 4, 64)
    np.testing.assert_array_equal(alone.view(np.uint16), rounded.view(np.uint16))
    np.testing.assert_array_equal(alone.view(np.uint16), c.transpose(0, 2, 1, 3).astype(BF16).view(np.uint16))
    _check(alone.transpose(0, 2, 1, 3), "bhst,bhte->bhse", [p, v], 2.0 ** -8, f"{units} context k={k}")


def _bias_program(layout: str, bias_type: str, also_return_c: bool) -> str:
    """A Linear layer's product into f32 with its bias added and the sum rounded to bf16 (torch's addmm under
    autocast), in one of two layouts: "q" (C [b, s, h, e] read as [b, h, s, e], bias [h, e], as attention's
    q/k/v) or "linear" (C [m, n], bias [n]); optionally C returned too (a second reader: nothing is fused)."""
    if layout == "q":
        loops, x, w, c, bias_dims = "bshek", "bsk", "hek", "bshe", "he"
        sizes = dict(b=2, s=32, h=4, e=16, k=64)
        out_loops, read, wrote = "bhse", "bshe", "bhse"
    else:
        loops, x, w, c, bias_dims = "mnk", "mk", "nk", "mn", "n"
        sizes = dict(m=48, n=80, k=96)
        out_loops, read, wrote = "mn", "mn", "mn"

    def amap(over, term):
        return f"affine_map<({', '.join(over)}) -> ({', '.join(term)})>"

    def ttype(term, t):
        return f"tensor<{'x'.join(str(sizes[ch]) for ch in term)}x{t}>"

    widen = "    %bf = arith.extf %bias : bf16 to f32\n" if bias_type == "bf16" else ""
    bias = "%bf" if bias_type == "bf16" else "%bias"
    results = ttype(wrote, "bf16") + (f", {ttype(c, 'f32')}" if also_return_c else "")
    kinds = ", ".join('"reduction"' if ch == "k" else '"parallel"' for ch in loops)
    parallel = ", ".join('"parallel"' for _ in out_loops)
    return f"""
func.func @f(%x: {ttype(x, 'bf16')}, %w: {ttype(w, 'bf16')}, %b: {ttype(bias_dims, bias_type)}) -> ({results}) {{
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : {ttype(c, 'f32')}
  %fill = linalg.fill ins(%zero : f32) outs(%e : {ttype(c, 'f32')}) -> {ttype(c, 'f32')}
  %c = linalg.generic {{indexing_maps = [{amap(loops, x)}, {amap(loops, w)}, {amap(loops, c)}], iterator_types =
      [{kinds}]}} ins(%x, %w : {ttype(x, 'bf16')}, {ttype(w, 'bf16')}) outs(%fill : {ttype(c, 'f32')}) {{
  ^bb0(%p: bf16, %q: bf16, %out: f32):
    %pf = arith.extf %p : bf16 to f32
    %qf = arith.extf %q : bf16 to f32
    %m = arith.mulf %pf, %qf : f32
    %s = arith.addf %out, %m : f32
    linalg.yield %s : f32
  }} -> {ttype(c, 'f32')}
  %eo = tensor.empty() : {ttype(wrote, 'bf16')}
  %r = linalg.generic {{indexing_maps =
      [{amap(out_loops, read)}, {amap(out_loops, bias_dims)}, {amap(out_loops, wrote)}], iterator_types = [{parallel}]}}
      ins(%c, %b : {ttype(c, 'f32')}, {ttype(bias_dims, bias_type)}) outs(%eo : {ttype(wrote, 'bf16')}) {{
  ^bb0(%in: f32, %bias: {bias_type}, %o: bf16):
{widen}    %sum = arith.addf %in, {bias} : f32
    %t = arith.truncf %sum : f32 to bf16
    linalg.yield %t : bf16
  }} -> {ttype(wrote, 'bf16')}
  return %r{", %c" if also_return_c else ""} : {results}
}}
""", sizes


@pytest.mark.parametrize("layout, bias_type, units", [("q", "bf16", AVX512BF16), ("linear", "bf16", AVX512BF16),
                                                      ("linear", "f32", F32)])
def test_a_bias_added_before_the_rounding_is_added_by_the_gemm_bit_for_bit(cache_dir, layout, bias_type, units):
    """`truncf(C + bias)` read from a contraction's f32 C only: the bf16 GEMM adds the bias to each whole f32 tile
    and rounds (`contract/epilogue.py`), no f32 C left; the result is numpy's: the f32 C plus the bias in f32,
    rounded to nearest even (bit for bit), where C is the unfused program's, itself within f32 accumulation of
    float64's product."""
    if units not in RUNNABLE:  # the instructions would fault on this CPU; the lit tests check their code
        pytest.skip(f"this CPU has no {units}")
    fused, sizes = _bias_program(layout, bias_type, False)
    generated = _after_contract(fused, units=units)
    entry = generated.split("func.func private")[0]
    assert "call @__slicer_contract_0(%arg0, %arg1, %arg3, %arg2)" in entry and "linalg.generic" not in entry
    spec = "bsk,hek->bshe" if layout == "q" else "mk,nk->mn"
    x, w = _inputs(spec, sizes)
    bias_shape = (sizes["h"], sizes["e"]) if layout == "q" else (sizes["n"],)
    bias = RNG.standard_normal(bias_shape).astype(BF16 if bias_type == "bf16" else np.float32)
    got = compile_library(fused, pipeline=_pipeline(units), cache_dir=cache_dir)["f"](x, w, bias)
    unfused, c = compile_library(_bias_program(layout, bias_type, True)[0], pipeline=_pipeline(units),
                                 cache_dir=cache_dir)["f"](x, w, bias)
    _check(c, spec, [x, w], 0.0, f"{units} {layout} C")
    want = (c + bias.astype(np.float32)).astype(BF16)
    if layout == "q":
        want = want.transpose(0, 2, 1, 3)
    assert got.dtype == BF16 and got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    np.testing.assert_array_equal(got.view(np.uint16), unfused.view(np.uint16))


def _chain_program(kind: str, also_return_c: bool) -> str:
    """A Linear layer's product C [m, n] into f32, then one of the mixed-precision step's epilogues: "widen"
    (fc1: `extf(truncf(C + bias))`, an f32 result holding bf16 values, the gelu's input) or "residual" (the
    attention projection and fc2: `truncf(extf(x) + extf(truncf(C + bias)))`, the residual added in f32 to the
    rounded projection and rounded again); optionally C returned too (a second reader: nothing is fused)."""
    f32, bf16 = "tensor<48x80xf32>", "tensor<48x80xbf16>"
    out = f32 if kind == "widen" else bf16
    results = out + (f", {f32}" if also_return_c else "")
    if kind == "widen":
        inputs, args, body = f"%c, %b : {f32}, tensor<80xbf16>", "%in: f32, %bias: bf16, %o: f32", (
            "    %bf = arith.extf %bias : bf16 to f32\n    %s = arith.addf %in, %bf : f32\n"
            "    %t = arith.truncf %s : f32 to bf16\n    %wd = arith.extf %t : bf16 to f32\n"
            "    linalg.yield %wd : f32\n")
        maps = "#mn, #n, #mn"
    else:
        inputs, args, body = (f"%r, %c, %b : {bf16}, {f32}, tensor<80xbf16>",
                              "%res: bf16, %in: f32, %bias: bf16, %o: bf16", (
                                  "    %rf = arith.extf %res : bf16 to f32\n    %bf = arith.extf %bias : bf16 to f32\n"
                                  "    %s = arith.addf %in, %bf : f32\n    %t = arith.truncf %s : f32 to bf16\n"
                                  "    %wd = arith.extf %t : bf16 to f32\n    %y = arith.addf %rf, %wd : f32\n"
                                  "    %z = arith.truncf %y : f32 to bf16\n    linalg.yield %z : bf16\n"))
        maps = "#mn, #mn, #n, #mn"
    return f"""
#mk = affine_map<(m, n, k) -> (m, k)>
#nk = affine_map<(m, n, k) -> (n, k)>
#mnk = affine_map<(m, n, k) -> (m, n)>
#mn = affine_map<(m, n) -> (m, n)>
#n = affine_map<(m, n) -> (n)>
func.func @f(%x: tensor<48x96xbf16>, %w: tensor<80x96xbf16>, %b: tensor<80xbf16>, %r: {bf16}) -> ({results}) {{
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : {f32}
  %fill = linalg.generic {{indexing_maps = [#mn], iterator_types = ["parallel", "parallel"]}} outs(%e : {f32}) {{
  ^bb0(%o: f32):
    linalg.yield %zero : f32
  }} -> {f32}
  %c = linalg.generic {{indexing_maps = [#mk, #nk, #mnk], iterator_types = ["parallel", "parallel", "reduction"]}}
      ins(%x, %w : tensor<48x96xbf16>, tensor<80x96xbf16>) outs(%fill : {f32}) {{
  ^bb0(%p: bf16, %q: bf16, %acc: f32):
    %pf = arith.extf %p : bf16 to f32
    %qf = arith.extf %q : bf16 to f32
    %m = arith.mulf %pf, %qf : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }} -> {f32}
  %eo = tensor.empty() : {out}
  %y = linalg.generic {{indexing_maps = [{maps}], iterator_types = ["parallel", "parallel"]}}
      ins({inputs}) outs(%eo : {out}) {{
  ^bb0({args}):
{body}  }} -> {out}
  return %y{", %c" if also_return_c else ""} : {results}
}}
"""


@pytest.mark.parametrize("kind, units", [("widen", AVX512BF16), ("residual", AVX512BF16), ("widen", F32),
                                         ("residual", F32)])
def test_rounded_then_widened_and_residual_epilogues_are_the_gemms_bit_for_bit(cache_dir, kind, units):
    """The mixed-precision GPT step's other epilogues (`_chain_program`): fc1's result rounded and widened back
    to f32, and the projection rounded, added to the residual in f32 and rounded again. The GEMM applies the
    same f32 ops to each whole f32 tile (`contract/epilogue.py`): the result is numpy's on the unfused
    program's C, bit for bit, and the unfused program's."""
    if units not in RUNNABLE:  # the instructions would fault on this CPU; the lit tests check their code
        pytest.skip(f"this CPU has no {units}")
    generated = _after_contract(_chain_program(kind, False), units=units)
    entry = generated.split("func.func private")[0]
    arguments = "%arg0, %arg1, %arg4, %arg2" if kind == "widen" else "%arg0, %arg1, %arg4, %arg2, %arg3"
    assert f"call @__slicer_contract_0({arguments})" in entry and "linalg.generic" not in entry
    x, w = _inputs("mk,nk->mn", dict(m=48, n=80, k=96))
    bias = RNG.standard_normal(80).astype(BF16)
    residual = RNG.standard_normal((48, 80)).astype(BF16)
    got = compile_library(_chain_program(kind, False), pipeline=_pipeline(units), cache_dir=cache_dir)["f"](
        x, w, bias, residual)
    unfused, c = compile_library(_chain_program(kind, True), pipeline=_pipeline(units), cache_dir=cache_dir)["f"](
        x, w, bias, residual)
    _check(c, "mk,nk->mn", [x, w], 0.0, f"{units} {kind} C")
    rounded = (c + bias.astype(np.float32)).astype(BF16).astype(np.float32)
    want = rounded if kind == "widen" else (residual.astype(np.float32) + rounded).astype(BF16)
    assert got.dtype == want.dtype and got.shape == want.shape
    as_bits = np.uint32 if kind == "widen" else np.uint16
    np.testing.assert_array_equal(got.view(as_bits), want.view(as_bits))
    np.testing.assert_array_equal(got.view(as_bits), unfused.view(as_bits))
