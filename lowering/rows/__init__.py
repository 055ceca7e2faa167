"""Elementwise ops and reductions as generated vector loops, fused row by row (`slicer-kernel-rows`).

Modules, by concern: `analysis` (what a row op is: lane, reductions), `grouping` (which ops fuse),
`buffers` (parameters, row scratch, non-temporal stores, prefetches), `point` (one op's vector loop at a
point), `cascade` (sums over outer, non-lane dims in a cascade of blocks of 16, as torch's sum), `emit`
(the driver: one function per group, and the pass over a module).

After bufferization, a program's non-contraction ops are `linalg.generic`s (fills, elementwise chains
already fused by `linalg-fuse-elementwise-ops`, reductions) and `memref.copy`s. This step generates
their loops itself and fuses consecutive ops that work row by row:

- one op: its *lane* dim is the loop dim along which every operand is contiguous (the last memref dim,
  stride 1) or constant; the lane loop runs on `vector<L x T>` (L = 64 bytes / widest element),
  unrolled `unroll` times, with a static scalar remainder. Reductions along the lane keep `unroll`
  vector accumulators and reduce them horizontally once (`vector.reduction`); body values that do
  not depend on the lane (a row's max, a bias column, constants) are computed once before the loop.
  exp/tanh/erf/log become arith expansions (`vector_math.py`), so they stay vectorized;
- a group: consecutive ops (only ops without buffers, e.g. constants, may sit between them) whose
  written buffers are all indexed by the same leading *row* dims are fused under one loop nest over
  the rows: softmax's max, exp, sum and divide, or layernorm's two reductions and two elementwise
  ops, then touch each row while it is in L1, so memory sees one read of the input and one write of
  the output instead of one pass per op. Legality: every access, read or write, to a buffer written
  in the group goes through the row dims in its leading positions (so row i of every op only meets
  row i of the others), and buffers are whole (function arguments or allocations, no views).

Ops it cannot take (transposes, gathers through non-contiguous dims, i1 buffers, index-typed or
`linalg.index` bodies) are left to the tile-and-vectorize step (`vectorize.py`).
"""

from .analysis import NotRowwise, Reduction, RowOp, analyze
from .buffers import RowsOptions
from .emit import rows_module
from .grouping import find_groups

__all__ = ["NotRowwise", "Reduction", "RowOp", "RowsOptions", "analyze", "find_groups", "rows_module"]
