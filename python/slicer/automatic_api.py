"""`slicer.auto`: the search for tactics (`slicer.automatic`) given the real pipeline to check its candidates with.

The search layer does not import `slicer.compile`; this module hands it in (`_graph_of`), and when nothing fits
the memory budget of a training step, searches again under each rematerialisation plan of the step
(`strategies.remat_plans`), cheapest recomputation first.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import replace

from slicer.api import compile
from slicer.automatic import AutoResult, search_tactics
from slicer.automatic.options import format_bytes
from slicer.core.errors import AutoError, DegradedStrategy
from slicer.frontends import ImportedProgram
from slicer.lowering import KernelGraph
from slicer.strategies import remat_plans
from slicer.tactics import Tactic


def auto(program, mesh, *, memory_budget=None, tactics: Sequence[Tactic] = (), objective: str = "time",
         entry: str | None = None) -> AutoResult:
    """Search the tactics that partition `program` (text, IR, or an `ImportedProgram` from `slicer.from_torch` or
    `slicer.training_step`) on `mesh` fastest within `memory_budget` (bytes per device, or "2GiB"; None: no
    limit); `tactics` are the user's own, kept first and completed; `objective` "time" or "memory". The search's
    best few candidates are compiled and ranked again by their kernel graphs' cost and exact peak memory
    (automatic/verification.py). Returns an `AutoResult`: `.tactics` for `slicer.compile`, `.predicted_seconds`,
    `.memory_bytes`, `.explain()`, `.text()` (the text form). Raises `AutoError` for a bad mesh, budget or
    objective and when nothing fits the budget."""
    if isinstance(program, ImportedProgram):
        def search(extra=()):
            return search_tactics(program.text, mesh, memory_budget=memory_budget, tactics=tactics,
                                  objective=objective, entry=entry or program.entry, arg_names=program.arg_names,
                                  arg_roles=program.arg_roles, result_names=program.result_names,
                                  follow_results=bool(program.result_names),
                                  compile_graph=_graph_of(program, entry, extra))
        try:
            return search()
        except AutoError as exc:
            if memory_budget is None or not program.arg_roles:
                raise
            return _auto_with_remat(program, search, exc)
    text = program if isinstance(program, str) else str(program)
    return search_tactics(text, mesh, memory_budget=memory_budget, tactics=tactics, objective=objective, entry=entry,
                          compile_graph=_graph_of(text, entry))


def _auto_with_remat(step: ImportedProgram, search, refused: AutoError) -> AutoResult:
    """`auto` when no layout fits the budget: the search again with each remat plan of `remat_plans(step)`,
    cheapest recomputation first, every candidate compiled with it (its peak and time, recomputation included,
    are the compiled kernel graph's); the first plan under which a layout fits, or the first refusal."""
    for remat in remat_plans(step):
        try:
            found = search((remat,))
        except AutoError:
            continue
        why = (f"rematerialisation {remat.policy} on {remat.pattern}: without remat {refused} With it the compiled "
               f"peak is {format_bytes(found.memory_bytes)}; remat plans are tried cheapest recomputation first "
               f"({', '.join(p.policy for p in remat_plans(step))})")
        return replace(found, tactics=found.tactics + (remat,), why_remat=why)
    raise refused


def _graph_of(program, entry, extra=()):
    """The real pipeline for `auto`'s verification: `program` compiled with some tactics (and the tactics
    `extra` after them: a remat plan) -> its kernel graph (a lost split is a warning `compile` gives; the
    candidate is priced as it compiles, so it is not repeated)."""
    def compile_graph(tactics, mesh) -> KernelGraph:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegradedStrategy)
            return compile(program, mesh=mesh, tactics=tuple(tactics) + tuple(extra), entry=entry).graph
    return compile_graph
