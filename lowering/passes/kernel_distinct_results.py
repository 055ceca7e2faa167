"""`slicer-kernel-distinct-results`: every result of a kernel gets its own buffer (`slicer.lowering.results`),
so `buffer-results-to-out-params` never sees one value returned twice."""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from slicer.core.passes import ModulePass, register_pass

from ..results import distinct_results


@register_pass
@dataclass(frozen=True)
class SlicerKernelDistinctResults(ModulePass):
    name = "slicer-kernel-distinct-results"
    description = "Copy every returned tensor or buffer that is returned twice, or is an argument, into a fresh one"

    def apply(self, module: ir.Operation) -> None:
        distinct_results(module.opview)
