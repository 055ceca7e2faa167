"""Why a plan misses the traffic lower bound: a diagnosis with its evidence (property tests, docs).

The synthesis finds a plan at the bound whenever a normal-form plan reaches it, so a plan above the bound
means none does. `diagnose` names the cause and proves it by re-running the exact search with fewer
restrictions: the least traffic of normal-form plans, of plans in any order within the memory bound, and of
plans in any order with unbounded memory. Each reason is a claim about those numbers, which
`Diagnosis.check` verifies (so a reason is never just "everything else").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from slicer.redistribution.layout import Layout, nontrivial_partial
from slicer.redistribution.plans import Plan
from slicer.redistribution.search import PlanSearch
from slicer.redistribution.synthesis import TOLERANCE, reduced

PARTIAL = "partial-sum source: a reduction receives data for every element of the target block"
NO_NORMAL_FORM = "divisibility: no normal-form plan exists (a slice would have to follow a gather)"
ORDER = "divisibility: a cheaper plan slices after a gather, which the normal form forbids"
MEMORY = "memory: reaching the bound needs blocks larger than max(|src|, |dst|)"
TILES = ("whole-tile collectives: the bound needs an irregular sub-tile exchange (Alltoallv-like) "
         "that no sequence of slice/all_to_all/permute/gather expresses")


def _cost(search: PlanSearch) -> int | None:
    found = search.run()
    return None if found is None else found[1]


@dataclass(frozen=True)
class Diagnosis:
    """Why `plan` misses the bound, with the least total traffic (elements) found by exact searches:
    `normal_form` (the synthesis' space), `capped` (any order, blocks within max(|src|,|dst|)) and
    `unbounded` (any order, any block size); None where that search has no plan."""

    reason: str
    bound: int
    planned: int
    normal_form: int | None
    capped: int | None
    unbounded: int | None

    def check(self) -> None:
        """Raise AssertionError if the evidence does not support the reason, or if the plan is not within the
        synthesis' tolerance of the least normal-form traffic."""
        if self.normal_form is not None:
            assert self.planned <= self.normal_form * (1 + TOLERANCE), (self, "plan above the least normal form")
        if self.reason == NO_NORMAL_FORM:
            assert self.normal_form is None, self
        elif self.reason == ORDER:
            assert self.capped is not None and self.capped < self.normal_form, self
        elif self.reason == MEMORY:
            assert self.unbounded is not None and self.unbounded <= self.bound < self.planned, self
            assert self.capped is None or self.capped > self.bound, self
        elif self.reason == TILES:
            assert self.unbounded is None or self.unbounded > self.bound, (self, "a whole-tile plan reaches it")
        else:
            assert self.reason == PARTIAL, self


def diagnose(plan: Plan) -> Diagnosis | None:
    """None if ``plan`` reaches the lower bound, else why not, with the evidence."""
    if plan.reaches_lower_bound:
        return None
    mesh = plan.mesh
    bound = int(plan.lower_bound_elements.sum())
    planned = plan.bytes_received_total // plan.itemsize
    if set(nontrivial_partial(mesh, plan.src)) - set(plan.dst.partial):
        return Diagnosis(PARTIAL, bound, planned, None, None, None)
    layout = Layout.get(mesh, plan.src.shape)
    src, dst = reduced(mesh, plan.src), reduced(mesh, plan.dst)
    normal_form = _cost(PlanSearch(mesh, layout, src, dst))
    cap = max(plan.src.local_size(mesh), plan.dst.local_size(mesh))
    capped = _cost(PlanSearch(mesh, layout, src, dst, cap=cap))
    unbounded = _cost(PlanSearch(mesh, layout, src, dst, cap=int(np.prod(src.shape, dtype=np.int64))))
    if normal_form is None:
        reason = NO_NORMAL_FORM
    elif capped is not None and capped < normal_form:
        reason = ORDER
    elif unbounded is not None and unbounded <= bound:
        reason = MEMORY
    else:
        reason = TILES
    return Diagnosis(reason, bound, planned, normal_form, capped, unbounded)


def explain(plan: Plan) -> str | None:
    """None if ``plan`` reaches the lower bound, else the reason (one of the constants above)."""
    found = diagnose(plan)
    return None if found is None else found.reason
