"""The rewrites of the loop/slice calculus, each a function `op -> bool` (True if it rewrote).

In the order the engine tries them (`LAWS`, then `LATE_LAWS`):
- `eliminate_dead`: unused value-semantics ops (slicer loops and slices included,
  which upstream DCE cannot remove: dynamic ops carry no side-effect information).
- `merge_duplicate_slice`: two identical slices in one block are one value (so
  CSE can merge what deforestation copied for each consumer).
- `merge_duplicate_loop`: two equivalent loops in one block are one loop (the
  CSE upstream cannot do for dynamic ops).
- `order_slices`: slices of slices along different dims commute; the one by the
  outer loop's range goes first (then it can be hoisted out of the inner loop).
- `compose_slices`: slices of slices along one dim are one slice over the
  product range (range algebra), which deforestation then matches against a
  loop over that product range.
- `deforest`: slice(loop_tile<d>(r' -> body(r')), d, r) == body(r).
- `commute_slice_into_loop`: a slice over range r of a loop over other axes is
  a loop over those axes of the slices of its blocks.
- `push_slice_into_producer` (backward): a block of an op's result is the op on
  blocks of its operands, when the rule table says so.
- `pull_op_into_loop` (forward): an op consuming a tile loop's result becomes a
  loop (tile or sum, by the rule table) over the same range computing it block-wise.
- `reduce_shared_blocks` (shared layout): a reduction reading a partial sum whole reads, when another reader
  slices it over the same axes, those blocks instead (one reduce_scatter for both, `shared_layout`).
- `hoist_invariant`: a pure op in a loop body that uses nothing from the body
  moves before the loop.
- `fuse_sibling_loops`: independent loops over the same range with the same
  action and one result type in one block become one loop.
Where they live: `merging` (dead code, duplicates, hoisting), `shared_layout` (shared layout), `slices` (ordering,
composing, deforestation, commuting), `blockwise` (backward and forward through the rule table), `fusion` (sibling
loops); what they share about loops in `loops`, the record they keep in `journal`.
Provenance: loops made by the laws carry `slicer.rule` (which rule) and inherit
`slicer.tactic` / `slicer.priority` (which tactic started the chain).
"""

from __future__ import annotations

from .blockwise import Candidate, forward_candidates, pull_op_into_loop, push_slice_into_producer
from .fusion import MIXED, fuse_sibling_loops, fusion_candidates, may_fuse, sibling_facts
from .journal import Journal, RewriteListener
from .loop_facts import NO_PRIORITY, priority, tactic_name, tile_loop_of
from .merging import (
                      duplicate_candidates,
                      duplicate_slices,
                      eliminate_dead,
                      hoist_invariant,
                      merge_duplicate_loop,
                      merge_duplicate_slice,
)
from .shared_layout import reduce_shared_blocks, sum_loop_of
from .slices import commute_slice_into_loop, compose_slices, deforest, order_slices

LAWS = (
    eliminate_dead,
    merge_duplicate_slice,
    merge_duplicate_loop,
    order_slices,
    compose_slices,
    deforest,
    commute_slice_into_loop,
    push_slice_into_producer,
    pull_op_into_loop,
    reduce_shared_blocks,
    hoist_invariant,
)
# Fusion runs only when no other law applies, so it sees the loops propagation settled on.
LATE_LAWS = (fuse_sibling_loops,)

__all__ = [
    "LAWS", "LATE_LAWS", "MIXED", "NO_PRIORITY", "Candidate", "Journal", "RewriteListener", "commute_slice_into_loop",
    "compose_slices", "deforest", "duplicate_candidates", "duplicate_slices", "eliminate_dead", "forward_candidates",
    "fuse_sibling_loops", "fusion_candidates", "hoist_invariant", "may_fuse", "merge_duplicate_loop",
    "merge_duplicate_slice", "order_slices", "priority", "pull_op_into_loop", "push_slice_into_producer",
           "reduce_shared_blocks",
    "sibling_facts", "sum_loop_of", "tactic_name", "tile_loop_of",
]
