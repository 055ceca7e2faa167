"""`slicer-kernel-onehot`: contractions with a one-hot factor (`uitofp(a[k] == b[m])` times the rest) as
scatters: loops over the mask's dims, the rest of the body only where it holds (`slicer.lowering.onehot`).
Runs on bufferized kernels, before `slicer-kernel-contract` would make them packed GEMMs."""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from slicer.core.passes import ModulePass, register_pass

from ..onehot import onehot_module


@register_pass
@dataclass(frozen=True)
class SlicerKernelOneHot(ModulePass):
    name = "slicer-kernel-onehot"
    description = ("Replace every bufferized contraction with a one-hot mask factor (an embedding's gradient, "
                   "index_add) by a call to a generated scatter: compares, then adds only where the mask holds")

    def apply(self, module: ir.Operation) -> None:
        onehot_module(module.opview)
