"""Elementwise ops and reductions as generated vector loops, fused row by row (`slicer-kernel-rows`).

Modules, by concern: `analysis` (what a row op is: lane, reductions), `grouping` (which ops fuse),
`buffers` (parameters, row scratch, non-temporal stores, prefetches), `point` (one op's vector loop at a
point), `cascade` (sums over outer, non-lane dims in a cascade of blocks of 16, as torch's sum), `emit`
(the driver: one function per group, and the pass over a module).

After bufferization, a program's non-contraction ops are `linalg.generic`s (fills, elementwise chains
already fused by `linalg-fuse-elementwise-ops`, reductions) and `memref.copy`s. This step generates
their loops itself and fuses consecutive ops that work row by row (the kinds of ops: docs/module-notes.md,
`lowering/rows/__init__.py`).
"""

from .analysis import NotRowwise, Reduction, RowOp, analyze
from .buffers import RowsOptions
from .emit import rows_module
from .grouping import find_groups

__all__ = ["NotRowwise", "Reduction", "RowOp", "RowsOptions", "analyze", "find_groups", "rows_module"]
