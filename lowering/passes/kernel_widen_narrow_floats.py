"""`slicer-kernel-widen-narrow-floats`: linalg ops on bf16/f16 compute in f32 and round their results once
(`slicer.lowering.narrow_floats`); buffers keep their narrow element type."""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from slicer.core.passes import ModulePass, register_pass

from ..narrow_floats import widen_narrow_floats


@register_pass
@dataclass(frozen=True)
class SlicerKernelWidenNarrowFloats(ModulePass):
    name = "slicer-kernel-widen-narrow-floats"
    description = ("Compute every linalg op on bf16/f16 tensors in f32 (accumulators included) and round each "
                   "narrow result once, by an elementwise truncf after the op")

    def apply(self, module: ir.Operation) -> None:
        widen_narrow_floats(module.opview)
