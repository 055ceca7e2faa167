"""`slicer-kernel-narrow-moves`: vector ops that only move bf16 / f16 elements move them as i16, with bitcasts
where the values come from or go to anything else (`slicer.lowering.narrow_moves`)."""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from slicer.core.passes import ModulePass, register_pass

from ..narrow_moves import move_narrow_as_integers


@register_pass
@dataclass(frozen=True)
class SlicerKernelNarrowMoves(ModulePass):
    name = "slicer-kernel-narrow-moves"
    description = ("Retype vector ops that only move bf16/f16 elements (extract, insert, shuffle, transpose, "
                   "to/from elements, broadcast, shape casts) to i16, with exact bitcasts at their edges, so "
                   "LLVM never shuffles narrow floats (its soft promotion aborts on odd-sized bf16 shuffles)")

    def apply(self, module: ir.Operation) -> None:
        move_narrow_as_integers(module.opview)
