"""`slicer-kernel-reject-narrow-memrefs`: a clear error, instead of an assertion failure in MLIR's LLVM
lowering, for any buffer of sub-byte elements left after bufferization (`slicer.lowering.widen_i1`)."""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from slicer.core.passes import ModulePass, register_pass

from ..widen_i1 import reject_narrow_memrefs


@register_pass
@dataclass(frozen=True)
class SlicerKernelRejectNarrowMemrefs(ModulePass):
    name = "slicer-kernel-reject-narrow-memrefs"
    description = "Fail with a KernelError naming the value if any memref of i1 (sub-byte) elements is left"

    def apply(self, module: ir.Operation) -> None:
        reject_narrow_memrefs(module.opview)
