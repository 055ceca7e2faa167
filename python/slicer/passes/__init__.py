"""Slicer's passes (layer 10 of docs/architecture.md): thin wrappers, one file per pass named like its lit
test (`test/Transforms/<pass-name>.mlir`), each giving its stage's options, docs and a call.

Every pass registers itself (`@register_pass`) in the one registry, `slicer.core.passes.PASSES`, when its
module is imported. `PASSES` here is the table of every pass (a `PassTable`), those of this layer and those
of the lowering (`slicer.lowering.passes`: `slicer-lower-to-loops` and the `slicer-kernel-*` steps, which
live there because the kernel pipeline below this layer runs them); it imports a pass's module when the
pass is first looked up, so `slicer-opt -p slicer-kernel-rows` loads neither the partitioner nor the search.
`run_pipeline` runs any pipeline mixing them with upstream passes. Adding a pass: one file here named like
the pass (or in `slicer.lowering.passes` for a kernel step) registered with `@register_pass`, its name in
the table, one lit test (a test fails for a registered pass without one, or a pass module not in a table).
"""

from __future__ import annotations

from mlir import ir
from mlir.passmanager import PassManager

from slicer.core import pipeline as _pipeline
from slicer.core.passes import PassTable
from slicer.dialect import make_context
from slicer.lowering.passes import LOWERING_PASSES

PASSES = PassTable(__name__, (
    "slicer-verify", "slicer-apply-tactics", "slicer-auto", "slicer-propagate", "slicer-partition",
    "slicer-collective-matmul", "slicer-remat", "slicer-bucket-collectives",
)) | LOWERING_PASSES
"""Every pass by name, this layer's and the lowering's; a pass's module is imported when it is looked up."""


def pass_names() -> list[str]:
    return sorted(PASSES)


def build_pass_manager(pipeline: str, context: ir.Context | None = None) -> PassManager:
    """One PassManager running `pipeline` (Slicer and upstream passes) on `builtin.module`."""
    return _pipeline.build_pass_manager(pipeline, context, PASSES)


def run_pipeline(module: ir.Module | ir.Operation, pipeline: str) -> None:
    """Run `pipeline` on `module` in place; raises ir.MLIRError with located diagnostics on failure."""
    _pipeline.run_pipeline(module, pipeline, PASSES)


def transform(module, pipeline: str, *, debug_info: bool = False) -> str:
    """Run `pipeline` on a copy of `module` (text or IR) in a fresh context; returns the result's text (with
    locations, e.g. the collectives' provenance, when `debug_info`)."""
    with make_context(), ir.Location.unknown():
        parsed = ir.Module.parse(module if isinstance(module, str) else str(module))
        run_pipeline(parsed, pipeline)
        return parsed.operation.get_asm(enable_debug_info=debug_info)


__all__ = ["PASSES", "build_pass_manager", "pass_names", "run_pipeline", "transform"]
