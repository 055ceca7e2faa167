"""`slicer-kernel-widen-i1`: boolean tensors stored as bytes before bufferization (`slicer.lowering.widen_i1`),
so masks cross kernels and are arguments."""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from slicer.core.passes import ModulePass, register_pass

from ..widen_i1 import widen_i1


@register_pass
@dataclass(frozen=True)
class SlicerKernelWidenI1(ModulePass):
    name = "slicer-kernel-widen-i1"
    description = "Rewrite every tensor of i1 elements as a tensor of i8 (0 or 1), arguments and results included"

    def apply(self, module: ir.Operation) -> None:
        widen_i1(module.opview)
