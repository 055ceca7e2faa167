"""The rewrites of the loop/slice calculus, each a function `op -> bool` (True if it rewrote).

Details: docs/module-notes.md, `propagation/laws.py`.
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
from .rotations import tile_rotation
from .shared_blocks import reduce_shared_blocks, sum_loop_of
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
    tile_rotation,
)
# Fusion runs only when no other law applies, so it sees the loops propagation settled on.
LATE_LAWS = (fuse_sibling_loops,)

__all__ = [
    "LAWS", "LATE_LAWS", "MIXED", "NO_PRIORITY", "Candidate", "Journal", "RewriteListener", "commute_slice_into_loop",
    "compose_slices", "deforest", "duplicate_candidates", "duplicate_slices", "eliminate_dead", "forward_candidates",
    "fuse_sibling_loops", "fusion_candidates", "hoist_invariant", "may_fuse", "merge_duplicate_loop",
    "merge_duplicate_slice", "order_slices", "priority", "pull_op_into_loop", "push_slice_into_producer",
           "reduce_shared_blocks",
    "sibling_facts", "sum_loop_of", "tactic_name", "tile_loop_of", "tile_rotation",
]
