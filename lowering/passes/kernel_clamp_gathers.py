"""`slicer-kernel-clamp-gathers`: gathers read within bounds whatever the data (`slicer.lowering.asserts`), so a
failed index check is reported by the caller instead of a wild read."""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from slicer.core.passes import ModulePass, register_pass

from ..asserts import clamp_gathers


@register_pass
@dataclass(frozen=True)
class SlicerKernelClampGathers(ModulePass):
    name = "slicer-kernel-clamp-gathers"
    description = "Clamp the computed indices of every tensor.extract in a linalg.generic body into the tensor's bounds"

    def apply(self, module: ir.Operation) -> None:
        clamp_gathers(module.opview)
