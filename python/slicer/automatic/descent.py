"""The search: greedy descent with local improvement over the (group, axis) variables of `candidates.py`, each layout
priced by `cost_model.Evaluator`.

From every argument replicated, and from the data tiled over each set of axes (`Search.seeds`), each sweep tries
every value of every variable (larger groups first, so a model's weights are decided before its small inputs when
they dominate, and the other way round) and keeps a change as soon as it lowers the objective; sweeps repeat until
none helps. One more descent visits the variables in argument order (inputs first, as data parallelism would), and
one decides the model's arguments with the data kept whole before freeing the data (so tiling the data first does not
block tensor parallelism that needs it whole); the best end point wins. The objective is lexicographic: first the
bytes above the budget, then time (objective "time") or peak memory ("memory"). Every layout is priced once (a cache
by choice)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from slicer.core.errors import AutoError
from slicer.core.mesh import Mesh
from slicer.tactics import Tactic, format_tactics

from .candidates import Group, layouts_of, make_groups, options, resolve_fixed, tactics_of
from .cost_model import Estimate, Evaluator
from .options import format_bytes
from .sketch import Sketch

MAX_SWEEPS = 6
#: The share of the budget the search keeps free: the model's peaks run up to ~5% below the compiled programs'
#: (the GPT training step: data parallel with sharded MLP weights 26.5 against 27.8 MiB compiled; the forward is
#: exact), and a candidate the model puts just under the budget that compiles over it costs a second compile
#: (seconds), so the search plans for a slightly smaller budget; compiled programs are checked against the budget.
PLANNING_MARGIN = 0.02


@dataclass(frozen=True)
class Predicted:
    """Predicted seconds per run: compute, communication exposed (waited for) and overlapped (hidden behind
    kernels), and their total (compute + exposed)."""

    compute: float
    exposed: float
    overlapped: float
    total: float

    @staticmethod
    def of(est: Estimate) -> "Predicted":
        return Predicted(est.compute, est.exposed, est.overlapped, est.total)


@dataclass(frozen=True)
class Decision:
    """One variable at the end of the search: its value, and the estimates of its other values."""

    group: Group
    axis: str
    dim: int | None
    alternatives: tuple[tuple[int | None, Estimate | None], ...]


class Search:
    """One search on one sketch and mesh (see the module docstring)."""

    def __init__(self, sketch: Sketch, mesh: Mesh, *, roles=(), budget: int | None = None, tactics=(),
                 objective: str = "time", evaluator: Evaluator | None = None):
        self.sketch, self.mesh, self.budget, self.objective = sketch, mesh, budget, objective
        self.planning = None if budget is None else int(budget * (1 - PLANNING_MARGIN))
        self.fixed = resolve_fixed(sketch, tuple(tactics))
        self.groups = make_groups(sketch, tuple(roles), frozenset(self.fixed))
        self.variables = [(g, a) for g in range(len(self.groups)) for a in mesh.axis_names
                          if len(options(self.groups[g], mesh, a)) > 1]
        self.evaluator = evaluator or Evaluator(sketch, mesh)
        self.cache: dict = {}

    def estimate(self, choice: dict) -> Estimate | None:
        key = tuple(sorted((k, v) for k, v in choice.items() if v is not None))
        if key not in self.cache:
            layouts = layouts_of(self.sketch, self.mesh, self.groups, dict(key), self.fixed)
            self.cache[key] = None if layouts is None else self.evaluator.evaluate(layouts)
        return self.cache[key]

    def score(self, est: Estimate | None, exact: bool = False) -> tuple:
        """The objective of an estimate, least best: bytes over the budget (the planning budget for the model's
        estimates; the budget itself, `exact`, for compiled programs), then time or peak."""
        if est is None:
            return (float("inf"),)
        budget = self.budget if exact else self.planning
        over = max(0, est.peak_bytes - budget) if budget is not None else 0
        comm = est.exposed + est.overlapped
        if self.objective == "memory" or over:
            return (over, est.peak_bytes, est.total, comm)
        return (0, est.total, comm, est.peak_bytes)

    def descend(self, order: list, choice: dict, objective_memory: bool = False) -> dict:
        choice = dict(choice)
        score = (lambda e: (e.peak_bytes, e.total) if e else (float("inf"),)) if objective_memory else self.score
        best = score(self.estimate(choice))
        for _ in range(MAX_SWEEPS):
            improved = False
            for var in order:
                for value in options(self.groups[var[0]], self.mesh, var[1]):
                    if value == choice.get(var):
                        continue
                    trial = {**choice, var: value}
                    found = score(self.estimate(trial))
                    if found < best:
                        best, choice, improved = found, trial, True
            if not improved:
                break
        return choice

    def run(self, refuse: bool = True) -> tuple[dict, Estimate]:
        """The best end point of the descents; over the budget, the smallest peak found (an `AutoError` with
        `refuse`, else returned for the compiled programs to decide: the model's peaks are estimates)."""
        sizes = {v: self.sketch.nbytes(self.groups[v[0]].members[0]) * len(self.groups[v[0]].members)
                 for v in self.variables}
        by_size = sorted(self.variables, key=lambda v: -sizes[v])
        data = set(self.data_groups())
        model_only = self.descend([v for v in by_size if v[0] not in data], {})
        ends = [self.descend(list(self.variables), {}), self.descend(by_size, model_only)]
        ends += [self.descend(by_size, seed) for seed in self.seeds()]
        choice = min(ends, key=lambda c: self.score(self.estimate(c)))
        est = self.estimate(choice)
        if self.budget is not None and est.peak_bytes > self.planning:
            smallest = [self.descend(by_size, end, objective_memory=True) for end in ends]
            within = [c for c in ends + smallest if self.estimate(c).peak_bytes <= self.budget]  # in the margin
            choice = min(within, key=lambda c: self.score(self.estimate(c), exact=True)) if within else \
                min(smallest, key=lambda c: self.estimate(c).peak_bytes)
            if refuse and self.estimate(choice).peak_bytes > self.budget:
                self.refuse(choice)
            est = self.estimate(choice)
        return choice, est

    def data_groups(self) -> list[int]:
        """The groups of the data: role "input", or without roles the first argument's group."""
        return [g for g, group in enumerate(self.groups) if group.role == "input"] or \
            [g for g, group in enumerate(self.groups) if 0 in group.members]

    def seeds(self) -> list[dict]:
        """Starting points: nothing tiled, and the data tiled on dim 0 over each non-empty set of axes (the
        data: the groups of role "input", or without roles the first argument's group), so that the descent
        can complete data parallelism over some axes with model parallelism over the others."""
        data = self.data_groups()
        axes = [a for a in self.mesh.axis_names if self.mesh.size(a) > 1]
        seeds = [{}]
        for mask in range(1, 2 ** len(axes)):
            chosen = [a for i, a in enumerate(axes) if mask >> i & 1]
            seed = {(g, a): 0 for g in data for a in chosen if 0 in options(self.groups[g], self.mesh, a)}
            if seed and self.estimate(seed) is not None:
                seeds.append(seed)
        return seeds

    def refuse(self, choice: dict) -> None:
        est = self.estimate(choice)
        tiles = format_tactics(self.tactics(choice)) or "everything replicated"
        raise AutoError(f"no partitioning found fits the memory budget of {format_bytes(self.budget)} per device on "
                        f"mesh {self.mesh}: the smallest peak found is {format_bytes(est.peak_bytes)} "
                        f"({est.peak_bytes} bytes, with {tiles}); raise the budget to at least that or use a larger "
                        "mesh")

    def tactics(self, choice: dict) -> list[Tactic]:
        layouts = layouts_of(self.sketch, self.mesh, self.groups, choice, self.fixed)
        named = any(not n.startswith("arg") or not n[3:].isdigit() for n in self.sketch.arg_names)
        return tactics_of(self.sketch, self.groups, layouts, named)

    def decisions(self, choice: dict) -> list[Decision]:
        """Every variable with its value and its alternatives' estimates (for `explain`)."""
        found = []
        for var in self.variables:
            alternatives = tuple((value, self.estimate({**choice, var: value}))
                                 for value in options(self.groups[var[0]], self.mesh, var[1])
                                 if value != choice.get(var))
            found.append(Decision(self.groups[var[0]], var[1], choice.get(var), alternatives))
        return found


def timed_search(search: Search, refuse: bool = True) -> tuple[dict, Estimate, float]:
    start = time.perf_counter()
    choice, est = search.run(refuse)
    return choice, est, time.perf_counter() - start
