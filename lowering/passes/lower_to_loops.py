"""`slicer-lower-to-loops`: give slicer loops their sequential meaning (`slicer.lowering.loops`); the kernel
pipeline's first stage."""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from slicer.core.passes import ModulePass, register_pass

from ..loops import lower_loops


@register_pass
@dataclass(frozen=True)
class SlicerLowerToLoops(ModulePass):
    name = "slicer-lower-to-loops"
    description = "Lower slicer.loop/slicer.slice to scf.for, tensor.extract_slice/insert_slice and linalg.add"

    def apply(self, module: ir.Operation) -> None:
        lower_loops(module)
