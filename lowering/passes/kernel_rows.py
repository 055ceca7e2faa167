"""`slicer-kernel-rows`: elementwise ops and reductions as generated vector loops, fused row by row
(`slicer.lowering.rows`). Runs on bufferized kernels; its option is `RowsOptions`' `unroll` (vectors per
iteration of the lane loop)."""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from slicer.core.passes import ModulePass, register_pass

from ..rows import RowsOptions, rows_module


@register_pass
@dataclass(frozen=True)
class SlicerKernelRows(ModulePass, RowsOptions):
    name = "slicer-kernel-rows"
    description = ("Replace bufferized elementwise ops and reductions by generated vector loops, consecutive "
                   "row-wise ops fused under one loop nest")

    def apply(self, module: ir.Operation) -> None:
        rows_module(module.opview, self)
