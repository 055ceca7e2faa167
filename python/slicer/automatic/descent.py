"""The search: greedy descent with local improvement over the (group, axis) variables of `candidates.py`, each tiling
priced by `cost_model.Evaluator`.

Each sweep tries every value of every variable (larger groups first, so a model's weights are decided before its
small inputs when they dominate, and the other way round) and keeps a change as soon as it lowers the objective;
sweeps repeat until none helps. Descents start from: the model's arguments decided with the data kept whole (so
tiling the data first does not block tensor parallelism that needs it whole); nothing tiled and the data tiled over
each set of axes (`TacticSearch.seeds`); and starting points composed per mesh axis
(`TacticSearch.composed`): 1-D patterns,
the end points of descents over one axis's variables alone (by the objective, by time ignoring the budget, by
memory, from the data tiled, with the data whole), assigned to each axis in every combination, the best kept for
each set of axes the data is tiled over. A descent changes one variable at a time, so from data over both axes of
a 2-D mesh it never reaches data over one axis with Megatron over the other (several variables must change at
once, each change alone raising the peak); the composed start is that tiling. The best end point wins. The
objective is lexicographic: first the bytes above the budget, then time (objective "time") or peak memory
("memory"). Every tiling is priced once (a cache by choice). The descents from different starts are
independent: they run side by side, one forked process per core (`parallel.py`), with the same answers."""

from __future__ import annotations

import functools
import itertools
import time
from dataclasses import dataclass, replace
from typing import Any

from slicer.core.errors import AutoError, InternalError
from slicer.core.mesh import Mesh
from slicer.tactics import Tactic, format_tactics

from .candidates import Group, make_groups, options, resolve_fixed, tactics_of, tilings_of
from .cost_model import Estimate, Evaluator
from .options import format_bytes
from .parallel import run_tasks
from .sketch import Sketch

MAX_SWEEPS = 6
#: The share of the budget the search keeps free: the model's peaks run a few % below the compiled programs' for
#: some tilings (the GPT training step on 8 devices: data -3%, Megatron -4%; FSDP within 1% since the model follows
#: the compiled program's gathered copies and gradient buckets), and a candidate the model puts just under the
#: budget that compiles over it costs a second compile (seconds), so the search plans for a slightly smaller budget;
#: compiled programs are checked against the budget. 2% (when the model erred by up to 5%) left out FSDP's GPT
#: forward on 2x4, modelled exactly, under a budget 2% above its peak: no tiling found fit.
PLANNING_MARGIN = 0.01


@dataclass(frozen=True)
class Predicted:
    """Predicted seconds per run: compute, communication exposed (waited for) and overlapped (hidden behind
    kernels), and their total (compute + exposed)."""

    compute: float
    exposed: float
    overlapped: float
    total: float

    @staticmethod
    def of(est: Estimate) -> Predicted:
        return Predicted(est.compute, est.exposed, est.overlapped, est.total)


@dataclass(frozen=True)
class Decision:
    """One variable at the end of the search: its value, and the estimates of its other values."""

    group: Group
    axis: str
    dim: int | None
    alternatives: tuple[tuple[int | None, Estimate | None], ...]


class TacticSearch:
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
        self._tactics: dict = {}
        self._pricing = [0, 0.0]  # tilings priced here and their seconds: what a descent is expected to cost
        self.symmetries = [] if self.fixed else axis_symmetries(mesh, self.evaluator.comm)

    def estimate(self, choice: dict, complete: bool = False) -> Estimate | None:
        """The model's estimate of the tiling `choice` (priced once); `complete`: with its collectives, which a
        tiling priced by a forked process (`descents`) comes back without."""
        key = tuple(sorted((k, v) for k, v in choice.items() if v is not None))
        usable = lambda est: not complete or est is None or est.collectives is not None  # noqa: E731
        if key in self.cache and usable(self.cache[key]):
            return self.cache[key]
        for rename in self.symmetries:  # a mirror image priced already: the same figures
            mirror = tuple(sorted(((g, rename[a]), d) for (g, a), d in key))
            if mirror in self.cache and usable(self.cache[mirror]):
                self.cache[key] = _renamed(self.cache[mirror], rename, self.mesh)
                return self.cache[key]
        started = time.perf_counter()
        tilings = tilings_of(self.sketch, self.mesh, self.groups, dict(key), self.fixed)
        self.cache[key] = None if tilings is None else self.evaluator.evaluate(tilings)
        self._pricing[0] += 1
        self._pricing[1] += time.perf_counter() - started
        return self.cache[key]

    def priced(self, choice: dict, complete: bool = False) -> Estimate:
        """`estimate` of a tiling a descent reached (it moves only to tilings that have one)."""
        est = self.estimate(choice, complete)
        if est is None:
            raise InternalError(f"the search reached a tiling without an estimate: {choice}")
        return est

    def descents(self, tasks: list) -> list[dict]:
        """The end points of independent descents (`tasks`, each a call of `descend`), side by side on the
        machine's cores (`parallel.run_tasks`; the same answers as one after another). A descent is expected
        to price a sweep's worth of tilings at the mean cost of those priced so far."""
        count, seconds = self._pricing
        per_tiling = seconds / count if count else 0.0
        return run_tasks(tasks, self.cache, per_tiling * 2 * len(self.variables),
                         compact=lambda est: None if est is None else est.figures())

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

    def descend(self, order: list, choice: dict, objective_memory: bool = False, free: bool = False) -> dict:
        """Greedy descent from `choice` over the variables `order`; by peak memory (`objective_memory`), by time
        ignoring the budget (`free`), else by the search's objective."""
        choice = dict(choice)
        if objective_memory:
            score = lambda e: (e.peak_bytes, e.total) if e else (float("inf"),)  # noqa: E731
        elif free:
            score = lambda e: (e.total, e.peak_bytes) if e else (float("inf"),)  # noqa: E731
        else:
            score = self.score
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
        starts = self.seeds()
        model_only = [v for v in by_size if v[0] not in data]
        composing = len(self.composed_axes()) >= 2
        # The descents to the 1-D patterns the composed starts are made of go side by side with the first one.
        first, *pattern_ends = self.descents([lambda: self.descend(by_size, self.descend(model_only, {})),
                                              *(self.pattern_descents(by_size) if composing else [])])
        composed = self.composed(by_size, self.axis_patterns(by_size, pattern_ends)) if composing else []
        starts += [c for c in composed if c not in starts]
        ends = [first] + self.descents([functools.partial(self.descend, by_size, start) for start in starts])
        choice = min(ends, key=lambda c: self.score(self.estimate(c)))
        est = self.priced(choice, complete=True)
        budget, planning = self.budget, self.planning
        if budget is not None and planning is not None and est.peak_bytes > planning:
            smallest = self.descents([functools.partial(self.descend, by_size, end, objective_memory=True)
                                      for end in ends])
            within = [c for c in ends + smallest if self.priced(c).peak_bytes <= budget]  # in the margin
            choice = min(within, key=lambda c: self.score(self.estimate(c), exact=True)) if within else \
                min(smallest, key=lambda c: self.priced(c).peak_bytes)
            if refuse and self.priced(choice).peak_bytes > budget:
                self.refuse(choice)
            est = self.priced(choice, complete=True)
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
        seeds: list[dict] = [{}]
        for mask in range(1, 2 ** len(axes)):
            chosen = [a for i, a in enumerate(axes) if mask >> i & 1]
            seed = {(g, a): 0 for g in data for a in chosen if 0 in options(self.groups[g], self.mesh, a)}
            if seed and self.estimate(seed) is not None:
                seeds.append(seed)
        return seeds

    def axis_patterns(self, by_size: list, ends: list | None = None) -> list[dict]:
        """1-D patterns {group: dim}: the end points of descents over one mesh axis's variables alone (the others
        left unused; `pattern_descents`, or their `ends` when run already), by the search's objective, by time
        ignoring the budget (data parallelism, typically), by peak memory, from the data tiled over that axis, and
        with the data kept whole (tensor parallelism); the empty pattern first. A pattern found on one axis is a
        candidate on every axis."""
        ends = [descent() for descent in self.pattern_descents(by_size)] if ends is None else ends
        found: list[dict] = [{}]
        for end in ends:
            pattern = {g: d for (g, _), d in end.items() if d is not None}
            if pattern not in found:
                found.append(pattern)
        return found

    def pattern_descents(self, by_size: list) -> list:
        """The descents whose end points are the 1-D patterns (`axis_patterns`), as calls of `descend`, in order:
        per mesh axis (one of each size: an axis of the same size as one done has the same descents), by the
        objective, by time alone, by memory, over the model's variables alone, and from the data tiled."""
        data = set(self.data_groups())
        descents: list = []
        done: set[int] = set()
        for axis in self.mesh.axis_names:
            own = [v for v in by_size if v[1] == axis]
            if not own or self.mesh.size(axis) in done:
                continue
            done.add(self.mesh.size(axis))
            start = {(g, axis): 0 for g in data if 0 in options(self.groups[g], self.mesh, axis)}
            descents += [functools.partial(self.descend, own, {}), functools.partial(self.descend, own, {}, free=True),
                         functools.partial(self.descend, own, {}, True),
                         functools.partial(self.descend, [v for v in own if v[0] not in data], {})]
            if start and self.estimate(start) is not None:
                descents.append(functools.partial(self.descend, own, start))
        return descents

    def composed_axes(self) -> list[str]:
        """The mesh axes starting points are composed over (`composed`): those with a variable."""
        return [a for a in self.mesh.axis_names if any(v[1] == a for v in self.variables)]

    def composed(self, by_size: list, patterns: list[dict] | None = None) -> list[dict]:
        """Starting points composed per mesh axis: every assignment of a 1-D pattern (`axis_patterns`, unless
        given) to each axis, priced, and the best kept for each set of axes the data is tiled over (as data over x
        with Megatron over y: distinct patterns on two axes, which a descent moving one variable at a time does
        not reach from data over both). None on a 1-D mesh: the descents over its axis are the search's own."""
        axes = self.composed_axes()
        if len(axes) < 2:
            return []  # one axis: the descents over it are the search's own
        patterns = self.axis_patterns(by_size) if patterns is None else patterns
        starts: list[dict] = []
        for combo in itertools.product(range(len(patterns)), repeat=len(axes)):
            start: dict = {}
            fits = True  # every group of the combination has its pattern's dim as an option on its axis
            for axis, p in zip(axes, combo):
                for g, d in patterns[p].items():
                    if d not in options(self.groups[g], self.mesh, axis):
                        fits = False
                        break
                    start[(g, axis)] = d
                if not fits:
                    break
            if fits and self.estimate(start) is not None and start not in starts:
                starts.append(start)
        starts.sort(key=lambda c: self.score(self.estimate(c)))
        data, best = set(self.data_groups()), dict[Any, Any]()
        for start in starts:  # the best per set of axes the data is tiled over (the structural choice)
            best.setdefault(frozenset(a for (g, a) in start if g in data), start)
        return list(best.values())

    def refuse(self, choice: dict) -> None:
        """AutoError: `choice`, the smallest peak found, is over the memory budget."""
        budget = self.budget
        if budget is None:
            raise InternalError("a search without a memory budget refused a tiling for its memory")
        est = self.priced(choice)
        tiles = format_tactics(self.tactics(choice)) or "everything replicated"
        raise AutoError(f"no partitioning found fits the memory budget of {format_bytes(budget)} per device on "
                        f"mesh {self.mesh}: the smallest peak found is {format_bytes(est.peak_bytes)} "
                        f"({est.peak_bytes} bytes, with {tiles}); raise the budget to at least that or use a larger "
                        "mesh")

    def tactics(self, choice: dict) -> list[Tactic]:
        """The tactics of `choice` (remembered: verification formats the same candidates' tactics repeatedly)."""
        key = tuple(sorted((k, v) for k, v in choice.items() if v is not None))
        if key not in self._tactics:
            tilings = tilings_of(self.sketch, self.mesh, self.groups, dict(key), self.fixed)
            named = any(not n.startswith("arg") or not n[3:].isdigit() for n in self.sketch.arg_names)
            self._tactics[key] = tuple(tactics_of(self.sketch, self.groups, tilings, named))
        return list(self._tactics[key])

    def decisions(self, choice: dict) -> list[Decision]:
        """Every variable with its value and its alternatives' estimates (for `explain`)."""
        found = []
        for var in self.variables:
            alternatives = tuple((value, self.estimate({**choice, var: value}))
                                 for value in options(self.groups[var[0]], self.mesh, var[1])
                                 if value != choice.get(var))
            found.append(Decision(self.groups[var[0]], var[1], choice.get(var), alternatives))
        return found


def axis_symmetries(mesh: Mesh, comm) -> list[dict[str, str]]:
    """The renamings of the mesh's axes that change no figure of the model: axes of the same size and the same
    link figures exchanged (on a 2x2 mesh, x for y). A tiling and its image under one cost the same (the model
    orders axes only by the mesh, breaks no tie by an axis's name), so the search prices one of each pair: the
    descents from data over x and from data over y are mirror images, step for step. None with more than 5
    axes (the permutations would cost more than they save) or none of the same size."""
    axes = tuple(mesh.axis_names)
    if len(axes) > 5 or len({mesh.size(a) for a in axes}) == len(axes):
        return []
    found = []
    for image in itertools.permutations(axes):
        rename = dict(zip(axes, image))
        if image != axes and all(mesh.size(a) == mesh.size(b) and comm.axis_figures(a) == comm.axis_figures(b)
                                 for a, b in rename.items()):
            found.append(rename)
    return found


def _renamed(est: Estimate | None, rename: dict[str, str], mesh: Mesh) -> Estimate | None:
    """The estimate of a tiling's mirror image: the same figures, its collectives over the renamed axes."""
    if est is None or est.collectives is None:
        return est
    order = mesh.axis_names
    collectives = [replace(c, axes=tuple(a for a in order if a in {rename[b] for b in c.axes}))
                   for c in est.collectives]
    return replace(est, collectives=collectives)


def timed_search(search: TacticSearch, refuse: bool = True) -> tuple[dict, Estimate, float]:
    start = time.perf_counter()
    choice, est = search.run(refuse)
    return choice, est, time.perf_counter() - start
