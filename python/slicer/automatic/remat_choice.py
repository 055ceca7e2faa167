"""Rematerialisation in the search (docs/remat.md, "Choosing remat automatically"): a remat plan is priced by the
cost model on the program it rewrites, and the search chooses a plan together with the layout when the budget
requires it.

A plan (`slicer.Remat`) is priced on the program rewritten by `slicer-remat` *before* partitioning: the same
rewrite `slicer.compile` runs after it, so the sketch has the recomputed ops (clones) where the compiled program
will have them. The cost model then prices them like any other op (their FLOPs and bytes are the recomputation's
time) and the liveness of the sketch drops what they no longer keep (the activations saved from the forward pass
to the backward). One difference: a collective the partitioning puts inside a recomputed region (Megatron's
all_reduce) is saved by the compiled program and its result read again, while the rewritten sketch recomputes the
op before it, so the model prices one more collective per recomputed block there (it overprices remat under
tensor parallelism; the compiled candidates are ranked on their own graphs).

Without a budget remat only costs time and is never chosen. With one, the search without remat goes first;
when no layout fits, or (objective "time") the budget binds (a faster tiling it priced is over the budget), every
plan is searched too and the plans are ranked by the model's time (or peak) of their best fitting layout (the
layout without remat included); the best is compiled and checked (`verification.py`), the next tried when it
compiles over the budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlir import ir

from slicer.dialect import make_context
from slicer.spmd.rematerialize import rematerialize
from slicer.tactics import Remat

from .cost_model import Estimate
from .options import format_bytes

#: A faster tiling than the chosen one is taken to show the budget binding when it is this much faster.
BINDING = 0.01


@dataclass
class RematPlan:
    """One remat plan (None: without remat) and what the search found under it."""

    remat: Remat | None
    search: Any  # descent.TacticSearch
    choice: dict
    estimate: Estimate
    refused: str = ""  # why the plan has no layout within the budget (by the model, or compiled)

    @property
    def name(self) -> str:
        return name(self.remat)

    def fits(self, budget: int | None) -> bool:
        return not self.refused and (budget is None or self.estimate.peak_bytes <= budget)


def name(remat: Remat | None) -> str:
    return "without remat" if remat is None else f"{remat.policy} on {remat.pattern}"


def rematerialized(text: str, remat: Remat) -> str:
    """`text` (an imported training step) with `remat` applied before partitioning: the program the search
    prices for that plan. SlicerError when the rewrite refuses (a pattern matching no module of the forward)."""
    with make_context():
        module = ir.Module.parse(text)
        rematerialize(module.operation, remat.pattern, remat.policy, remat.names)
        return module.operation.get_asm(enable_debug_info=True)


def budget_binds(search, estimate: Estimate) -> bool:
    """Whether the budget made the search settle for a slower layout: no layout it found fits the planning
    budget, or one it priced is faster by more than `BINDING` and over that budget."""
    planning = search.planning
    if planning is None:
        return False
    if estimate.peak_bytes > planning:
        return True
    limit = estimate.total * (1 - BINDING)
    return any(e is not None and e.total < limit and e.peak_bytes > planning for e in search.cache.values())


def ranked(plans: list[RematPlan], budget: int | None, objective: str = "time") -> list[RematPlan]:
    """The plans with a fitting layout, best first by the model's time (or peak, `objective` "memory"; a tie
    keeps the given order: cheaper recomputation first), then the others, smallest peak first."""
    fitting = sorted((p for p in plans if p.fits(budget)),
                     key=lambda p: p.estimate.total if objective == "time" else p.estimate.peak_bytes)
    return fitting + sorted((p for p in plans if not p.fits(budget)), key=lambda p: p.estimate.peak_bytes)


def why(chosen: RematPlan, plans: list[RematPlan], skipped: list[str]) -> str:
    """The explanation's line on the choice of remat: each plan's fastest layout by the model (`skipped`: the
    plans whose rewrite refused, and why)."""
    if chosen.remat is None:
        return ""
    base = plans[0]
    if base.refused:
        head = f"without remat {base.refused}"
    else:
        head = (f"without remat the budget binds: the fastest layout within it is predicted "
                f"{base.estimate.total * 1e3:.3f} ms")
    figures = "; ".join([f"{p.name}: {p.estimate.total * 1e3:.3f} ms, peak {format_bytes(p.estimate.peak_bytes)}"
                         for p in plans] + skipped)
    return (f"rematerialisation {chosen.remat.policy} on {chosen.remat.pattern}: {head}. The model priced each "
            f"plan's best layout ({figures}); the fastest that fits was compiled and checked")


__all__ = ["RematPlan", "budget_binds", "name", "ranked", "rematerialized", "why"]
