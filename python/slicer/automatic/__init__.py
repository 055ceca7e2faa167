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

from slicer.core.errors import AutoError, CompileError, InvalidTactic
from slicer.tactics import Replicate, Tile, format_tactics

from .cost_model import Estimate, Evaluator
from .descent import Predicted, TacticSearch, timed_search
from .explanation import AutoResult
from .machine import Machine
from .options import check_mesh, check_objective, format_bytes, parse_budget
from .sketch import Sketch, read_sketch
from .verification import best, verify


def search_tactics(text: str, mesh, *, memory_budget=None, tactics=(), objective: str = "time", entry=None,
                   arg_names=(), arg_roles=(), result_names=(), follow_results: bool = False,
                   compile_graph=None) -> AutoResult:
    """Search the tactics of `text` (MLIR) on `mesh`; see `slicer.auto`. `follow_results`: results named like
    an argument leave laid out as that argument (what `slicer.compile` asks of an imported program).
    `compile_graph(tactics, mesh)`: the real pipeline (-> `KernelGraph`); when given, the best candidates are
    compiled and ranked again by their compiled cost (`verification.py`), and the result's figures are the
    compiled program's."""
    started = time.perf_counter()
    mesh, budget, objective = check_mesh(mesh), parse_budget(memory_budget), check_objective(objective)
    tactics = tuple(tactics)
    for tactic in tactics:
        if not isinstance(tactic, (Tile, Replicate)):
            raise InvalidTactic(f"{tactic!r} is not a tactic; use slicer.Tile(...) or slicer.Replicate(...)")
    sketch = read_sketch(text, entry, arg_names, result_names)
    follow = {}
    if follow_results:
        names = sketch.arg_names
        follow = {r: names.index(n) for r, n in enumerate(sketch.result_names) if n and n in names}
    evaluator = Evaluator(sketch, mesh, follow=follow)
    search = TacticSearch(sketch, mesh, roles=arg_roles, budget=budget, tactics=tactics, objective=objective,
                    evaluator=evaluator)
    _check_user_tactics(search, tactics)
    choice, est, _ = timed_search(search, refuse=compile_graph is None)
    compiled = ()
    if compile_graph is not None:
        compiled = tuple(verify(search, choice, tactics, lambda t: compile_graph(t, mesh), started))
        if not compiled:
            raise AutoError(f"slicer.auto: the pipeline refused every candidate it was given on mesh {mesh} (the "
                            f"search's choice: {format_tactics(search.tactics(choice)) or 'everything replicated'})"
                            "; compile that with slicer.compile to see why")
        chosen = best(search, compiled)
        if budget is not None and chosen.estimate.peak_bytes > budget:
            _refuse_compiled(search, chosen)
        choice, est = chosen.choice, chosen.estimate
    found = tuple(search.tactics(choice))
    counts: dict = collections.defaultdict(lambda: [0, 0.0])
    for c in est.collectives:
        counts[(c.kind, c.axes)][0] += 1
        counts[(c.kind, c.axes)][1] += c.seconds
    return AutoResult(tactics + found, Predicted.of(est), est.peak_bytes, mesh, budget, objective,
                      time.perf_counter() - started, len(search.cache), lambda: search.decisions(choice),
                      len(tactics), search.estimate({}), tuple((k, tuple(v)) for k, v in counts.items()), compiled)


def _refuse_compiled(search: TacticSearch, chosen) -> None:
    """AutoError: compiled, none of the candidates tried fits the budget."""
    tiles = format_tactics(chosen.tactics) or "everything replicated"
    raise AutoError(f"no partitioning found fits the memory budget of {format_bytes(search.budget)} per device on "
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
