"""`slicer-opt --print-collectives`: after the pipeline, print the collectives report (to stderr).

A separate module so slicer_opt.py needs only a one-line hook; the report itself is
`slicer.spmd.report.report` (usable from Python on any partitioned module).
"""

from __future__ import annotations

from mlir import ir

from slicer.spmd import report


def collectives_text(module: ir.Module) -> str:
    """The report text, or a note when the module holds no partitioned function."""
    result = report(module)
    if not result.results and not result.collectives:
        return "slicer-opt: --print-collectives: no partitioned function (run slicer-partition first)"
    return result.text()
