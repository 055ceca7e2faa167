"""`slicer-kernel-fold-widenings`: an elementwise widening (`arith.extf`) read by several generics is folded into
each of them, which then read the narrow tensor (`slicer.lowering.widenings`)."""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from slicer.core.passes import ModulePass, register_pass

from ..widenings import fold_widenings


@register_pass
@dataclass(frozen=True)
class SlicerKernelFoldWidenings(ModulePass):
    name = "slicer-kernel-fold-widenings"
    description = ("Fold each elementwise widening (a generic yielding arith.extf of its input) into the generics "
                   "that read it, so they read the narrow tensor and widen it in their bodies")

    def apply(self, module: ir.Operation) -> None:
        fold_widenings(module.opview)
