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

Details: docs/module-notes.md, `lowering/contract/__init__.py`.
"""

from .analysis import Contraction, NotAContraction, Side, analyze
from .blocking import ContractOptions
from .emit import contract_module, contraction_text
from .ukernel import ukernel_text

__all__ = ["ContractOptions", "Contraction", "NotAContraction", "Side", "analyze", "contract_module",
           "contraction_text", "ukernel_text"]
