"""`slicer-kernel-vectorize`: tile and vectorize the linalg ops left with a generated transform script
(`slicer.lowering.vectorize`). Its options are `VectorizeOptions`' fields (`parallel`, `matmul=i,j,k`, `kc`,
`transpose`)."""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from slicer.core.passes import ModulePass, register_pass

from ..vectorize import VectorizeOptions, vectorize_module


@register_pass
@dataclass(frozen=True)
class SlicerKernelVectorize(ModulePass, VectorizeOptions):
    name = "slicer-kernel-vectorize"
    description = "Tile and vectorize every linalg.generic with the transform dialect (ops it cannot take stay)"
    dependent_dialects = ("transform",)  # the generated script is parsed while the pass runs

    def apply(self, module: ir.Operation) -> None:
        vectorize_module(module.opview, self)
