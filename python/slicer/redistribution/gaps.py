"""Why a plan misses the traffic lower bound: a diagnosis used by the property tests and the docs.

The synthesis finds a plan at the bound whenever a normal-form plan reaches it, so a plan above the bound
means none does. This module names the cause by re-running the (exact) search with fewer restrictions.
"""

from __future__ import annotations

import numpy as np

from .layout import Layout, nontrivial_partial
from .plans import Plan
from .search import Search
from .synthesis import _reduced

PARTIAL = "partial-sum source: a reduction receives data for every element of the target block"
NO_NORMAL_FORM = "divisibility: no normal-form plan exists (a slice would have to follow a gather)"
ORDER = "divisibility: a cheaper plan slices after a gather, which the normal form forbids"
MEMORY = "memory: reaching the bound needs blocks larger than max(|src|, |dst|)"
TILES = ("whole-tile collectives: the bound needs an irregular sub-tile exchange (Alltoallv-like) "
         "that no sequence of slice/all_to_all/permute/gather expresses")


def _cost(search: Search) -> int | None:
    found = search.run()
    return None if found is None else found[1]


def explain(plan: Plan) -> str | None:
    """None if ``plan`` reaches the lower bound, else the reason (one of the constants above)."""
    if plan.reaches_lower_bound:
        return None
    mesh = plan.mesh
    if set(nontrivial_partial(mesh, plan.src)) - set(plan.dst.partial):
        return PARTIAL
    if not plan.is_normal_form:
        return NO_NORMAL_FORM
    layout = Layout.get(mesh, plan.src.shape)
    src, dst = _reduced(mesh, plan.src), _reduced(mesh, plan.dst)
    ours = _cost(Search(mesh, layout, src, dst))  # the least normal-form traffic (plans may be 0.5% above)
    bound = int(plan.lower_bound_elements.sum())
    cap = max(plan.src.local_size(mesh), plan.dst.local_size(mesh))
    relaxed = _cost(Search(mesh, layout, src, dst, cap=cap))
    if relaxed is not None and relaxed < ours:
        return ORDER
    unbounded = _cost(Search(mesh, layout, src, dst, cap=int(np.prod(src.shape, dtype=np.int64))))
    if unbounded is not None and unbounded <= bound:
        return MEMORY
    return TILES
