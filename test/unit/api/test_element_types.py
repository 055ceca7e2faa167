"""bf16 through every stage on the simulator: a linalg program (matmul, elementwise, reduction) compiled under
data parallel, Megatron-style and contraction-split tactics, run on simulated devices and compared with the
unpartitioned program and with float64 (bf16: 8 significant bits, so ~1e-2 relative); partial sums of bf16
are added in f32 and rounded once. Element types Slicer does not support are a clear error naming what is."""

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import slicer
from slicer.core import compare

BF16 = np.dtype(ml_dtypes.bfloat16)
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

PROGRAM = """
func.func @f(%x: tensor<8x64xbf16>, %w: tensor<64x32xbf16>) -> (tensor<8x32xbf16>, tensor<8xbf16>) {
  %zero = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<8x32xbf16>
  %f = linalg.fill ins(%zero : bf16) outs(%e : tensor<8x32xbf16>) -> tensor<8x32xbf16>
  %h = linalg.matmul ins(%x, %w : tensor<8x64xbf16>, tensor<64x32xbf16>) outs(%f : tensor<8x32xbf16>) ->
      tensor<8x32xbf16>
  %g = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%h : tensor<8x32xbf16>) outs(%e : tensor<8x32xbf16>) {
  ^bb0(%v: bf16, %o: bf16):
    %t = math.tanh %v : bf16
    %r = arith.mulf %t, %v : bf16
    linalg.yield %r : bf16
  } -> tensor<8x32xbf16>
  %e2 = tensor.empty() : tensor<8xbf16>
  %f2 = linalg.fill ins(%zero : bf16) outs(%e2 : tensor<8xbf16>) -> tensor<8xbf16>
  %s = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>],
                       iterator_types = ["parallel", "reduction"]}
      ins(%g : tensor<8x32xbf16>) outs(%f2 : tensor<8xbf16>) {
  ^bb0(%v: bf16, %o: bf16):
    %r = arith.addf %v, %o : bf16
    linalg.yield %r : bf16
  } -> tensor<8xbf16>
  return %g, %s : tensor<8x32xbf16>, tensor<8xbf16>
}
"""

TACTICS = {"data": "arg0.0=x", "megatron": "arg1.1=x", "split-contraction": "arg0.1=x;arg1.0=x"}


@pytest.fixture(scope="module")
def inputs():
    rng = np.random.default_rng(3)
    return rng.standard_normal((8, 64)).astype(BF16), (rng.standard_normal((64, 32)) / 8).astype(BF16)


@pytest.mark.parametrize("tactic", list(TACTICS))
def test_bf16_program_partitions_and_runs_like_the_unpartitioned_one(inputs, tactic):
    x, w = inputs
    whole = slicer.compile(PROGRAM, mesh=slicer.Mesh(x=2)).run(x, w)
    prog = slicer.compile(PROGRAM, mesh=slicer.Mesh(x=2), tactics=slicer.parse_tactics(TACTICS[tactic]))
    got = prog.run(x, w)
    h = x.astype(np.float64) @ w.astype(np.float64)
    g = np.tanh(h) * h
    for name, result, same, reference in zip("gs", got, whole, (g, g.sum(1))):
        assert result.dtype == BF16, name
        # the bf16 comparison rule: a few units in the last place (slicer.core.compare.tolerances)
        assert compare.same_result(same, result), (tactic, name, compare.difference(same, result))
        assert np.max(np.abs(result.astype(np.float64) - reference)) <= 2 ** -6 * np.abs(reference).max(), name
    if tactic == "split-contraction":  # partial sums of %h: an all_reduce of bf16 blocks, summed in f32
        assert "all_reduce" in prog.explain()


def test_bf16_byte_counts_are_half_of_f32(inputs):
    f32 = slicer.compile(PROGRAM.replace("bf16", "f32"), mesh=slicer.Mesh(x=2),
                         tactics=slicer.parse_tactics(TACTICS["split-contraction"]))
    bf16 = slicer.compile(PROGRAM, mesh=slicer.Mesh(x=2), tactics=slicer.parse_tactics(TACTICS["split-contraction"]))
    # the all_reduce of the 8x32 partial sums: 2 bytes an element on the wire; its MPI form sums in f32, whose
    # send and receive copies the memory report counts as scratch (2 x 8x32 x 4 B)
    assert "total: 1 collectives, 512 B received per device" in bf16.explain()
    assert "total: 1 collectives, 1024 B received per device" in f32.explain()
    assert "all_reduce %2->%3 (+2.0 KiB (2048 B) scratch)" in bf16.explain()
    assert "argument #1 %w (%1)  bf16[64, 32] as [[x],[]]      2.0 KiB (2048 B) of 4.0 KiB (4096 B)" in bf16.explain()
    assert 2 * bf16.graph.value_bytes(bf16.graph.args[0]) == f32.graph.value_bytes(f32.graph.args[0])


def test_unsupported_element_types_are_clear_errors():
    text = (EXAMPLES / "mlp.mlir").read_text().replace("f32", "f8E4M3FN")
    prog = slicer.compile(text, mesh=slicer.Mesh(x=2), tactics=slicer.parse_tactics("arg0.0=x"))
    arrays = [np.ones(s, np.float32) for s in ((8, 16), (16, 32), (32,), (32, 16))]
    with pytest.raises(slicer.SlicerError, match=r"element type f8E4M3FN is not supported; supported: bf16, f16, "
                                                 r"f32, f64, i1, i8, i16, i32, i64 \(convert the program's tensors"):
        prog.run(*arrays)


def test_a_float32_array_for_a_bf16_argument_says_how_to_convert(inputs):
    prog = slicer.compile(PROGRAM, mesh=slicer.Mesh(x=2), tactics=slicer.parse_tactics(TACTICS["data"]))
    x, w = inputs
    with pytest.raises(slicer.RunError, match=r"argument #0 of @f must be bfloat16\[8, 64\], got float32\[8, 64\] "
                                              r"\(numpy: array.astype\(ml_dtypes.bfloat16\); torch: tensor.bfloat16"):
        prog.run(x.astype(np.float32), w)


BF16_MATMUL = """
func.func @f(%a: tensor<64x96xbf16>, %b: tensor<96x48xbf16>) -> tensor<64x48xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x48xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<64x48xf32>) -> tensor<64x48xf32>
  %c = linalg.generic {indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (k, n)>,
                                        affine_map<(m, n, k) -> (m, n)>],
                       iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%a, %b : tensor<64x96xbf16>, tensor<96x48xbf16>) outs(%f : tensor<64x48xf32>) {
  ^bb0(%x: bf16, %y: bf16, %o: f32):
    %xf = arith.extf %x : bf16 to f32
    %yf = arith.extf %y : bf16 to f32
    %p = arith.mulf %xf, %yf : f32
    %s = arith.addf %o, %p : f32
    linalg.yield %s : f32
  } -> tensor<64x48xf32>
  return %c : tensor<64x48xf32>
}"""


def test_compile_forces_the_units_of_bf16_contractions():
    """`slicer.compile(..., bf16_units=)`: every unit this host has gives the f32-accumulated product; the choice
    travels with the kernel graph (to the ranks) and into the kernels' pipeline; units the host lacks, or a
    name that is none, are a CompileError saying what to use."""
    from slicer.lowering import KernelGraph
    from slicer.lowering.contract.matrix_units import BF16_UNITS, host_units
    from slicer.runtime.execution.executor import kernel_pipeline

    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(s).astype(ml_dtypes.bfloat16) for s in ((64, 96), (96, 48)))
    want = a.astype(np.float64) @ b.astype(np.float64)
    usable = BF16_UNITS[BF16_UNITS.index(host_units()):]
    for units in ("auto", *usable):
        prog = slicer.compile(BF16_MATMUL, mesh=slicer.Mesh(x=2), tactics=[slicer.Tile(arg=0, dim=0, axes="x")],
                              bf16_units=units)
        assert KernelGraph.from_json(prog.graph.to_json()).bf16_units == units
        assert (f"bf16-units={units}" in kernel_pipeline(prog.graph).text()) == (units != "auto")
        np.testing.assert_allclose(prog.run(a, b), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    with pytest.raises(slicer.CompileError, match=r"bf16_units must be one of auto, amx, avx512bf16, f32, got 'tpu'"):
        slicer.compile(BF16_MATMUL, mesh=slicer.Mesh(x=2), bf16_units="tpu")
    faster = BF16_UNITS[:BF16_UNITS.index(host_units())]
    for units in faster:
        with pytest.raises(slicer.CompileError, match=rf"this host's CPU has only {host_units()}"):
            slicer.compile(BF16_MATMUL, mesh=slicer.Mesh(x=2), bf16_units=units)
