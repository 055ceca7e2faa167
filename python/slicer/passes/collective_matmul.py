"""`slicer-collective-matmul`: a contraction feeding an all_reduce or reduce_scatter split into chunks whose
collectives overlap the next chunk's compute, where the cost model says it pays
(`slicer.spmd.chunked_contractions`, docs/runtime.md, "Overlap")."""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from slicer.core.passes import ModulePass, register_pass
from slicer.spmd.chunked_contractions import collective_matmul


@register_pass
@dataclass(frozen=True)
class SlicerCollectiveMatmul(ModulePass):
    name = "slicer-collective-matmul"
    description = ("Split contractions feeding an all_reduce or reduce_scatter into chunks that overlap their "
                   "collectives")

    chunks: int = 0
    """0: the cost model chooses (often: no split); a count >= 2: that many chunks wherever the dim divides."""

    def apply(self, module: ir.Operation) -> None:
        collective_matmul(module, chunks=self.chunks)
