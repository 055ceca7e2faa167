"""Contractions with a one-hot factor run as scatters (`lowering/onehot.py`, `slicer-kernel-onehot`): the
embedding gradient's generic (`uitofp(idx[k] == ids[m] and idx[k] != -1) * g[k, n]`, the ids a tensor or the
loop index) adds each token's row into its id's row only, in token order, as numpy's `np.add.at` does (so
exactly its float32 sums); what is not a one-hot (a plain matmul, a mask comparing two reduction-dim values)
stays a contraction."""

import ml_dtypes
import numpy as np
from mlir import ir

from slicer.dialect import make_context
from slicer.lowering import DEFAULT_PIPELINE, compile_library
from slicer.lowering.onehot import onehot_module


def embedding_grad(tokens: int, vocab: int, width: int, mask_cmp: str = "%in, %id") -> str:
    """The embedding's gradient as torch's import fuses it: a [vocab, width] sum over tokens of masked rows."""
    t = f"tensor<{vocab}x{width}xf32>"
    return f"""
#mk = affine_map<(v, d, k) -> (k)>
#mv = affine_map<(v, d, k) -> (v)>
#mg = affine_map<(v, d, k) -> (k, d)>
#mo = affine_map<(v, d, k) -> (v, d)>
func.func @grad(%idx: tensor<{tokens}xi64>, %ids: tensor<{vocab}xi64>, %g: tensor<{tokens}x{width}xf32>) -> {t} {{
  %none = arith.constant -1 : i64
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : {t}
  %f = linalg.fill ins(%zero : f32) outs(%e : {t}) -> {t}
  %r = linalg.generic {{indexing_maps = [#mk, #mv, #mg, #mo], iterator_types = ["parallel", "parallel", "reduction"]}}
      ins(%idx, %ids, %g : tensor<{tokens}xi64>, tensor<{vocab}xi64>, tensor<{tokens}x{width}xf32>) outs(%f : {t}) {{
  ^bb0(%in: i64, %id: i64, %x: f32, %acc: f32):
    %0 = arith.cmpi ne, %in, %none : i64
    %1 = arith.cmpi eq, {mask_cmp} : i64
    %2 = arith.andi %1, %0 : i1
    %3 = arith.uitofp %2 : i1 to f32
    %4 = arith.mulf %3, %x : f32
    %5 = arith.addf %acc, %4 : f32
    linalg.yield %5 : f32
  }} -> {t}
  return %r : {t}
}}
"""


def test_the_embedding_gradient_adds_each_tokens_row_into_its_ids_row(cache_dir):
    tokens, vocab, width = 37, 50, 40
    rng = np.random.default_rng(0)
    idx = rng.integers(0, 12, tokens).astype(np.int64)  # repeated ids
    idx[[3, 9]] = -1  # padding: no row
    idx[5] = vocab + 7  # no id equals it: no row (the kernels' checks are the frontend's business)
    ids = np.arange(vocab, dtype=np.int64)
    g = rng.standard_normal((tokens, width)).astype(np.float32)
    g[3] = np.nan  # a padding token's NaN reaches no row (a GEMM's 0 * NaN would reach every row)
    want = np.zeros((vocab, width), np.float32)
    kept = (idx >= 0) & (idx < vocab)
    np.add.at(want, idx[kept], g[kept])
    got = compile_library(embedding_grad(tokens, vocab, width), cache_dir=cache_dir)["grad"](idx, ids, g)
    np.testing.assert_array_equal(got, want)


BUFFERIZED = """
#mk = affine_map<(v, d, k) -> (k)>
#mv = affine_map<(v, d, k) -> (v)>
#mg = affine_map<(v, d, k) -> (k, d)>
#mo = affine_map<(v, d, k) -> (v, d)>
func.func @grad(%idx: memref<8xi64>, %ids: memref<64xi64>, %g: memref<8x32xf32>, %out: memref<64x32xf32>) {
  linalg.generic {indexing_maps = [#mk, #mv, #mg, #mo], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%idx, %ids, %g : memref<8xi64>, memref<64xi64>, memref<8x32xf32>) outs(%out : memref<64x32xf32>) {
  ^bb0(%in: i64, %id: i64, %x: f32, %acc: f32):
    %1 = arith.cmpi eq, LHS, RHS : i64
    %3 = arith.uitofp %1 : i1 to f32
    %4 = arith.mulf %3, %x : f32
    %5 = arith.addf %acc, %4 : f32
    linalg.yield %5 : f32
  }
  return
}
"""


def test_only_a_one_hot_mask_becomes_a_scatter():
    with make_context():
        one_hot = ir.Module.parse(BUFFERIZED.replace("LHS", "%in").replace("RHS", "%id"))
        replaced = onehot_module(one_hot)
        assert len(replaced) == 1 and "dims [2, 0]" in replaced[0]  # tokens outermost, then ids
        assert "__slicer_onehot_" in str(one_hot) and "linalg.generic" not in str(one_hot)
        # both sides read the token dim only: a diagonal, not a one-hot over ids (left to the GEMM)
        diagonal = ir.Module.parse(BUFFERIZED.replace("LHS", "%in").replace("RHS", "%in"))
        assert onehot_module(diagonal) == [] and "linalg.generic" in str(diagonal)
        # a mask that reads the sum so far selects nothing ahead of time
        running = ir.Module.parse(BUFFERIZED.replace("LHS, RHS : i64", "%in, %id : i64\n    %r = arith.cmpf ogt, "
                                                     "%acc, %x : f32\n    %m = arith.andi %1, %r : i1").replace(
                                                         "arith.uitofp %1", "arith.uitofp %m"))
        assert onehot_module(running) == [] and "linalg.generic" in str(running)


def test_an_imported_embedding_gradient_equals_torchs():
    # torch's embedding backward through the import (a one-hot mask fused into the contraction) and the kernels
    # (the scatter): repeated tokens, a padding row that gets nothing, a table wider than one vector
    import torch

    import slicer

    weight, idx = torch.randn(40, 24), torch.tensor([[3, 7, 3, 0], [7, 7, 39, 1]])
    grad = torch.randn(2, 4, 24)

    def gradient(weight, idx, grad):
        return torch.func.grad(lambda w: (torch.nn.functional.embedding(idx, w, padding_idx=0) * grad).sum())(weight)

    program = slicer.compile(slicer.from_torch(gradient, weight, idx, grad), mesh=slicer.Mesh(x=1))
    with make_context():  # the ids are the loop index here (linalg.index), not a tensor of them: a scatter too
        module = ir.Module.parse(program.graph.kernels_mlir)
        DEFAULT_PIPELINE.until("vectorize").run(module)
        assert "call @__slicer_onehot_" in str(module)
    np.testing.assert_allclose(program.run(weight, idx, grad), gradient(weight, idx, grad).numpy(), rtol=1e-6,
                               atol=1e-6)


def test_the_bf16_embedding_gradient_is_a_scatter_too(cache_dir):
    """Under mixed precision the mask is made in bf16 and widened, `extf(uitofp(m) : bf16)`, and the gradient is
    bf16: still a scatter (it was a GEMM over the whole vocabulary), exactly np.add.at of the widened rows."""
    text = embedding_grad(37, 50, 40).replace("tensor<37x40xf32>", "tensor<37x40xbf16>").replace(
        "%x: f32", "%x0: bf16").replace("%3 = arith.uitofp %2 : i1 to f32", "%30 = arith.uitofp %2 : i1 to bf16\n"
                                        "    %3 = arith.extf %30 : bf16 to f32\n    %x = arith.extf %x0 : bf16 to f32")
    with make_context():
        module = ir.Module.parse(text)
        DEFAULT_PIPELINE.until("bufferize").run(module)
        assert onehot_module(module)
    rng = np.random.default_rng(1)
    idx = rng.integers(0, 12, 37).astype(np.int64)
    idx[3] = -1
    g = rng.standard_normal((37, 40)).astype(ml_dtypes.bfloat16)
    g[3] = np.nan
    want = np.zeros((50, 40), np.float32)
    np.add.at(want, idx[idx >= 0], g[idx >= 0].astype(np.float32))
    got = compile_library(text, cache_dir=cache_dir)["grad"](idx, np.arange(50, dtype=np.int64), g)
    np.testing.assert_array_equal(got, want)
