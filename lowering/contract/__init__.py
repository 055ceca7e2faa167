"""Contractions as packed GEMMs generated for this CPU (the `slicer-kernel-contract` step).

Every bufferized `linalg.generic` whose body is `out + f_A * f_B` (matmul, batch_matmul, einsum-style
generics with any permutation of operand dims, attention's `sd,dhe->hse`, a softmax division fused into
`p @ v`, a scale fused into `q @ k^T`, ...) is replaced by a call to a generated function: a BLIS-style
loop nest over packed panels around one register-tile micro-kernel.

Modules, by concern: `analysis` (what the contraction is; `zero_init`: whether C starts at zero),
`blocking` (cache blocks and their loops), `packing` (the A and B panels), `ukernel` (the register
tile), `emit` (the driver: one function per contraction, and the pass over a module); before this pass,
`im2col` (`slicer-kernel-im2col`) rewrites convolutions, whose inputs are read through `oh * s + kh`, into a
patch copy (`patch_copy`) and a plain contraction this pass takes.

Classification (`analysis.analyze`): the body's product is split into factors (operands of the `mulf` tree);
each factor depends on some loop dims through the inputs it reads. The factors are assigned to two sides
so that the parallel dims split into
- M: dims of side A only, N: dims of side B only, batch: dims of both; K: the reduction dims;
- C's innermost (stride-1) dim must be an N dim: the micro-kernel stores vectors along it.
Each group may hold several dims (attention's `sd,dhe->hse` has N = (h, e); its output projection has
K = (h, e)); groups are ordered by C's strides (M, N, batch) and by the B side's strides (K).

Generated loop nest (static shapes, one function per contraction):

    for batch dims:
      for N blocks (about `nc` columns):          # a block = whole inner dims x a chunk of one dim
        for K blocks (about `kc`):
          pack B:  Bp[panel][k][NR] = f_B(...)   # NR = nv vectors; zero padded past the edge
          for M blocks (about `mc` rows):
            pack A:  Ap[tile][k][MR] = f_A(...)  # the A-side expression (e.g. ex / den) runs here
            for panels of the N block:            # a kc x NR panel of B stays in L1 ...
              for row tiles of the M block:       # ... while the A block streams from L2
                micro-kernel: C[MR x NR] += Ap[tile] * Bp[panel] over the block's k

The micro-kernel (one per element type, shared by the module) keeps the MR x NR tile in MR * nv vector
registers (8 x 2 zmm for f32), loads nv vectors of B and broadcasts MR scalars of A per k, unrolled by
`unroll`; edge tiles (M or N not a multiple of the tile) run on a zeroed scratch tile copied in and out.
Packing reads inputs with vector loads where the lane dim is contiguous (B along N, A along M), with
vector loads along K transposed in registers where they are contiguous along K (A[m, k], B[n, k]), and
with scalar loads otherwise, so any operand layout packs into the same panels, as IREE's data tiling
does. Packing costs O(MK + KN) against the O(MNK) micro-kernel work.

C starting at zero (a zero fill before the op, also through copies of a zero buffer; `zero_before`)
lets the first K block start from zero accumulators, and the fill is dropped when nothing reads it; a
large C written once (one K block) gets non-temporal stores.

Contractions of bf16 operands (each side one bf16 input, maybe widened by `arith.extf`; C in f32 or bf16)
get the same loop nest with bf16 panels in pairs along K and f32 accumulation (`bf16_gemm`, `bf16_packing`)
around an AMX, AVX512-BF16 or f32 micro-kernel (`bf16_ukernels`), on the units the target has or the
`bf16-units` option forces (`matrix_units`); when the only reader of their f32 C rounds it to bf16, the GEMM
stores the rounded tiles into that reader's output instead (`epilogue`).

Why generated text and not the transform dialect: the loop nest, the packing layout and the register
tile are exactly what the benchmark measures, and a text template keeps each of them explicit
(measured: 180-245 GFLOP/s single-threaded for the f32 contractions of `benchmarks/kernels.py` on this
AVX-512 machine, against OpenBLAS's 100-129). Ops the analysis rejects keep the tile-and-vectorize path
of `vectorize.py`.
"""

from .analysis import Contraction, NotAContraction, Side, analyze
from .blocking import ContractOptions
from .emit import contract_module, contraction_text
from .ukernel import ukernel_text

__all__ = ["ContractOptions", "Contraction", "NotAContraction", "Side", "analyze", "contract_module",
           "contraction_text", "ukernel_text"]
