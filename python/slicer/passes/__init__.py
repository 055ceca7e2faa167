"""Slicer's passes (layer 10 of docs/architecture.md): thin wrappers, one file per pass named like its lit
test (`test/Transforms/<pass-name>.mlir`), each giving its stage's options, docs and a call.

Every pass registers itself (`@register_pass`) in the one registry, `slicer.core.passes.PASSES`; importing
this package imports every pass, those of this layer and those of the lowering (`slicer.lowering.passes`:
`slicer-lower-to-loops` and the `slicer-kernel-*` steps, which live there because the kernel pipeline below
this layer runs them). `PASSES` is that registry; `run_pipeline` runs any pipeline mixing them with
upstream passes. Adding a pass: one file here (or in `slicer.lowering.passes` for a kernel step) registered
with `@register_pass`, one import, one lit test (a test fails for a registered pass without one).
"""

from __future__ import annotations

from mlir import ir
from mlir.passmanager import PassManager

from slicer.core import pipeline as _pipeline
from slicer.core.passes import PASSES
from slicer.dialect import make_context
from slicer.lowering.passes import LOWERING_PASSES

from .apply_tactics import SlicerApplyTactics
from .auto import SlicerAuto
from .bucket_collectives import SlicerBucketCollectives
from .collective_matmul import SlicerCollectiveMatmul
from .partition import SlicerPartition
from .propagate import SlicerPropagate
from .remat import SlicerRemat
from .verify import SlicerVerify

PASS_CLASSES = (SlicerVerify, SlicerApplyTactics, SlicerAuto, SlicerPropagate, SlicerPartition, SlicerCollectiveMatmul,
                SlicerRemat, SlicerBucketCollectives, *LOWERING_PASSES)
"""Every pass class, imported (hence registered) here: `PASSES` holds exactly these, by name."""


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


__all__ = ["PASSES", "PASS_CLASSES", "build_pass_manager", "pass_names", "run_pipeline", "transform"]
