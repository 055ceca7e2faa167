"""Automatic partitioning (docs/tactics.md, "Automatic partitioning"): search the tactics of a program on a mesh
under a memory budget, and explain the choice.

`search_tactics` reads the program once (`sketch.py`), groups its arguments (`candidates.py`), prices tilings
with a model of propagation, partitioning, kernels and collectives (`cost_model.py`) in a greedy descent
(`descent.py`), compiles its best few candidates when given the pipeline and ranks them again by the compiled
programs' cost (`verification.py`, `graph_cost.py`), and returns an `AutoResult` (`explanation.py`).
`slicer.auto` (the API) accepts imported programs too; `slicer-auto` is the pass.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Sequence
from dataclasses import replace

from slicer.core.errors import AutoError, CompileError, InternalError, InvalidTactic, SlicerError
from slicer.tactics import Remat, Replicate, Tile, format_tactics

from .cost_model import Estimate, Evaluator
from .descent import Predicted, TacticSearch, timed_search
from .explanation import AutoResult
from .machine import Machine
from .options import check_mesh, check_objective, format_bytes, parse_budget
from .remat_choice import RematPlan, budget_binds, name, ranked, rematerialized, why
from .sketch import Sketch, read_sketch
from .verification import Compiled, best, verify


def search_tactics(text: str, mesh, *, memory_budget=None, tactics=(), objective: str = "time", entry=None,
                   arg_names=(), arg_roles=(), result_names=(), follow_results: bool = False,
                   compile_graph=None, remat_plans: Sequence[Remat] = ()) -> AutoResult:
    """Search the tactics of `text` (MLIR) on `mesh`; see `slicer.auto`. `follow_results`: results named like
    an argument leave laid out as that argument (what `slicer.compile` asks of an imported program).
    `compile_graph(tactics, mesh)`: the real pipeline (-> `KernelGraph`); when given, the best candidates are
    compiled and ranked again by their compiled cost (`verification.py`), and the result's figures are the
    compiled program's. `remat_plans`: the `Remat` tactics the search may add when the budget requires it
    (`remat_choice.py`: priced by the model on the program each rewrites), the chosen one last in the tactics."""
    started = time.perf_counter()
    mesh, budget, objective = check_mesh(mesh), parse_budget(memory_budget), check_objective(objective)
    tactics = tuple(tactics)
    for tactic in tactics:
        if not isinstance(tactic, (Tile, Replicate)):
            raise InvalidTactic(f"{tactic!r} is not a tactic; use slicer.Tile(...) or slicer.Replicate(...)")

    def searched(program: str, remat: Remat | None) -> RematPlan:
        sketch = read_sketch(program, entry, arg_names, result_names)
        follow = {}
        if follow_results:
            names = sketch.arg_names
            follow = {r: names.index(n) for r, n in enumerate(sketch.result_names) if n and n in names}
        search = TacticSearch(sketch, mesh, roles=arg_roles, budget=budget, tactics=tactics, objective=objective,
                              evaluator=Evaluator(sketch, mesh, follow=follow))
        _check_user_tactics(search, tactics)
        choice, est, _ = timed_search(search, refuse=False)
        plan = RematPlan(remat, search, choice, est)
        if not plan.fits(budget):
            try:
                search.refuse(choice)
            except AutoError as exc:
                plan.refused = str(exc)
        return plan

    plans, skipped = [searched(text, None)], list[str]()
    consider_remat = bool(remat_plans) and budget is not None
    if consider_remat and (not plans[0].fits(budget) or
                           objective == "time" and budget_binds(plans[0].search, plans[0].estimate)):
        plans += _remat_plans(searched, text, remat_plans, skipped)
        consider_remat = False
    tried: list[RematPlan] = []
    while True:
        for plan in [p for p in ranked(plans, budget, objective) if p not in tried]:
            tried.append(plan)
            if compile_graph is None:
                if plan.refused:  # the model's smallest peak is over the budget
                    raise AutoError(plans[0].refused)
                return _result(plan, why(plan, plans, skipped), tactics, (), started)
            try:
                return _verified(plan, why(plan, plans, skipped), tactics, compile_graph, mesh, budget, started)
            except AutoError as exc:
                plan.refused = str(exc)
        if not consider_remat:  # every plan refused: the refusal without remat says why
            raise AutoError(plans[0].refused)
        plans += _remat_plans(searched, text, remat_plans, skipped)  # the model said it fits; compiled, it did not
        consider_remat = False


def _remat_plans(searched, text: str, remat_plans: Sequence[Remat], skipped: list[str]) -> list[RematPlan]:
    """The search under each remat plan (a plan whose rewrite refuses: said in `skipped`)."""
    found = []
    for remat in remat_plans:
        try:
            found.append(searched(rematerialized(text, remat), remat))
        except SlicerError as exc:
            skipped.append(f"{name(remat)}: {exc}")
    return found


def _verified(plan: RematPlan, why_remat: str, tactics: tuple, compile_graph, mesh, budget, started) -> AutoResult:
    """`plan`'s best candidates compiled (with its remat tactic after theirs) and the best one's result; AutoError
    when the pipeline refuses them all or the best compiles over the budget."""
    search = plan.search
    extra = (plan.remat,) if plan.remat is not None else ()
    compiled = tuple(verify(search, plan.choice, tactics, lambda t: compile_graph(tuple(t) + extra, mesh), started))
    if not compiled:
        raise AutoError(f"slicer.auto: the pipeline refused every candidate it was given on mesh {mesh} (the "
                        f"search's choice: {format_tactics(search.tactics(plan.choice)) or 'everything replicated'})"
                        "; compile that with slicer.compile to see why")
    chosen = best(search, compiled)
    if budget is not None and chosen.estimate.peak_bytes > budget:
        _refuse_compiled(search, chosen, budget)
    return _result(replace(plan, choice=chosen.choice, estimate=chosen.estimate), why_remat, tactics, compiled, started)


def _result(plan: RematPlan, why_remat: str, tactics: tuple, compiled: tuple, started: float) -> AutoResult:
    search, choice, est = plan.search, plan.choice, plan.estimate
    found = tuple(search.tactics(choice)) + ((plan.remat,) if plan.remat is not None else ())
    counts: dict = collections.defaultdict(lambda: [0, 0.0])
    if est.collectives is None:
        raise InternalError("slicer.auto: the chosen tiling's estimate was priced without its collectives")
    for c in est.collectives:
        counts[(c.kind, c.axes)][0] += 1
        counts[(c.kind, c.axes)][1] += c.seconds
    return AutoResult(tactics + found, Predicted.of(est), est.peak_bytes, search.mesh, search.budget,
                      search.objective, time.perf_counter() - started, len(search.cache),
                      lambda: search.decisions(choice), len(tactics), search.estimate({}),
                      tuple((k, tuple(v)) for k, v in counts.items()), compiled, why_remat=why_remat)


def _refuse_compiled(search: TacticSearch, chosen: Compiled, budget: int) -> None:
    """AutoError: compiled, none of the candidates tried fits the budget."""
    tiles = format_tactics(chosen.tactics) or "everything replicated"
    raise AutoError(f"no partitioning found fits the memory budget of {format_bytes(budget)} per device on "
                    f"mesh {search.mesh}: the smallest peak found is {format_bytes(chosen.estimate.peak_bytes)} "
                    f"({chosen.estimate.peak_bytes} bytes, with {tiles}, compiled); raise the budget to at least that "
                    "or use a larger mesh")


def _check_user_tactics(search: TacticSearch, tactics) -> None:
    """CompileError for a user tactic naming an axis the mesh lacks (the rewriter would say so after the
    search; saying it first saves the search)."""
    for tactic in tactics:
        for axis in getattr(tactic, "axes", ()):
            if not search.mesh.has_axis(axis):
                raise CompileError(f"slicer.auto: tactic {tactic} names axis '{axis}', which mesh {search.mesh} does "
                                   f"not have (axes: {', '.join(search.mesh.axis_names)})")


__all__ = ["AutoResult", "Estimate", "Evaluator", "Machine", "Predicted", "TacticSearch", "Sketch", "read_sketch",
           "search_tactics"]
