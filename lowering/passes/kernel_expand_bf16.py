"""`slicer-kernel-expand-bf16`: roundings to bf16 as vector integer ops (upstream `arith-expand{include-bf16}`),
only in modules that have any (`slicer.lowering.narrow_floats.expand_bf16_truncation`)."""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from slicer.core.passes import ModulePass, register_pass

from ..narrow_floats import expand_bf16_truncation


@register_pass
@dataclass(frozen=True)
class SlicerKernelExpandBf16(ModulePass):
    name = "slicer-kernel-expand-bf16"
    description = ("Expand every arith.truncf to bf16 into integer ops (upstream arith-expand{include-bf16=true}), "
                   "so no kernel calls __truncsfbf2; a module without such a truncation is left as it is")

    def apply(self, module: ir.Operation) -> None:
        expand_bf16_truncation(module.opview)
