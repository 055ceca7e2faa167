"""`slicer.auto`: the search for tactics (`slicer.automatic`) given the real pipeline to check its candidates with.

The search layer does not import `slicer.compile`; this module hands it in (`_graph_of`), and under a memory budget
hands a training step's rematerialisation plans too (`strategies.remat_plans`), which the search prices and
chooses among when the budget requires it (`automatic/remat_choice.py`).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from slicer.api import compile
from slicer.automatic import AutoResult, search_tactics
from slicer.core.errors import DegradedStrategy
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
        plans = remat_plans(program) if memory_budget is not None and program.arg_roles else []
        return search_tactics(program.text, mesh, memory_budget=memory_budget, tactics=tactics, objective=objective,
                              entry=entry or program.entry, arg_names=program.arg_names, arg_roles=program.arg_roles,
                              result_names=program.result_names, follow_results=bool(program.result_names),
                              compile_graph=_graph_of(program, entry), remat_plans=plans)
    text = program if isinstance(program, str) else str(program)
    return search_tactics(text, mesh, memory_budget=memory_budget, tactics=tactics, objective=objective, entry=entry,
                          compile_graph=_graph_of(text, entry))


def _graph_of(program, entry):
    """The real pipeline for `auto`'s verification: `program` compiled with some tactics (a remat plan's `Remat`
    last) -> its kernel graph (a lost split is a warning `compile` gives; the candidate is priced as it compiles,
    so it is not repeated)."""
    def compile_graph(tactics, mesh) -> KernelGraph:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegradedStrategy)
            return compile(program, mesh=mesh, tactics=tuple(tactics), entry=entry).graph
    return compile_graph
