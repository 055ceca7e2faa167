"""Plan synthesis: the cheapest normal-form sequence of collectives from one distributed type to another.

Normal form: ``(all_slice | reduce_scatter)* (all_to_all | permute | all_reduce)* all_gather*`` -- blocks only
shrink, then keep their size, then grow, so every intermediate block is at most ``max(|src|, |dst|)`` and
``peak_bytes_per_device <= max(|src|, |dst|) + max_step min(|step input|, |step output|) <= 2 max(|src|, |dst|)``
(live bytes of a step = its input block + its output block).

PlanSearch (``search.py``): A* over (type, phase) nodes, phase 0 = shrinking, 1 = constant size, 2 = growing.
Moves: slice one unused axis onto a dim; reduce-scatter one partial axis onto a dim; all-reduce any set of
partial axes; all-to-all of any minor suffix of a dim (several axes at once) onto another dim; permute to
*any* type of the same local shape (one merged permute instead of several); gather a minor suffix, only if
the result can still reach the target by gathers. Cost model: total elements received over all devices,
ties broken by the number of steps. The heuristics (the traffic lower bound, and a structural bound from
what all-to-alls and permutes must still do) are consistent. A first exact pass admits only plans at the
traffic lower bound, so the plan reaches it whenever a normal-form plan does; otherwise weighted A* returns
a plan within ``TOLERANCE`` (0.5%) of the least traffic among normal-form plans.
Mesh axes of size 1 carry no data: the search ignores them and one free relabelling ``permute`` (no pairs)
puts them where the target wants them, merged with the last middle permute when there is one. The search is
deterministic (moves are generated in a fixed order and heap ties are broken by insertion order).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from slicer.core.errors import InternalError, RedistributionError
from slicer.core.mesh import Mesh

from . import subaxes
from .costs import CostModel, tie_scale
from .layout import Layout
from .moves import GatherMove, PermuteMove
from .plans import Plan
from .search import PlanSearch, collector_paused
from .steps import AllGather, AllReduce, AllSlice, Permute, Step, apply_rule, step_with_type
from .subaxes import Refinement
from .types import DistType, itemsize


def cost_model(cost: CostModel | str | None) -> CostModel:
    """``None`` -> `CostModel.default`; ``"time"`` / ``"bytes"`` -> the default figures with that objective."""
    if cost is None:
        return CostModel.default()
    if isinstance(cost, str):
        return CostModel.default().with_objective(cost)
    if not isinstance(cost, CostModel):
        raise RedistributionError(f"cost={cost!r}: give a CostModel, 'time' or 'bytes'")
    return cost


@collector_paused
def plan(mesh: Mesh, src: DistType, dst: DistType, *, dtype: str = "f32", frozen: tuple[str, ...] = (),
         cost: CostModel | str | None = None, sub_axes: bool = True) -> Plan:
    """Synthesise the cheapest normal-form redistribution plan from ``src`` to ``dst`` on ``mesh``.

    ``cost``: the objective and its figures (`costs.CostModel`; default `CostModel.default`, estimated
    time; ``"bytes"`` for the total bytes received). ``sub_axes``: let intermediate types and steps use
    parts of axes (``y:(1)2``, see `subaxes`); source and target may use them either way.

    ``frozen`` names mesh axes along which devices hold *different arrays* (members of a family, e.g. values
    computed inside a partitioning loop over those axes): no step may communicate over them, since that
    would mix members. The plan is synthesised on the mesh without them and lifted back (every collective
    runs within the groups of equal frozen coordinates; a permute's pairs are repeated for each of them).
    Neither type may use a frozen axis. A model with figures per link class prices each axis by its class
    (`CostModel.for_mesh`)."""
    model = cost_model(cost).for_mesh(mesh)
    if frozen:
        return _plan_within(mesh, src, dst, dtype, tuple(frozen), model, sub_axes)
    size = itemsize(dtype)
    src = DistType.of(mesh, src.shape, src.dims, src.partial)
    dst = DistType.of(mesh, dst.shape, dst.dims, dst.partial)
    if src.shape != dst.shape:
        raise RedistributionError(f"source shape {src.shape} and target shape {dst.shape} differ")
    created = [a for a in dst.partial if a not in src.partial and subaxes.size(mesh, a) > 1]
    if created:
        if not (src.has_sub_axes() or dst.has_sub_axes()) or _creates_partial(mesh, src, dst):
            raise RedistributionError(
                f"target {dst} is partial over {','.join(created)} but the source {src} is not: a redistribution "
                f"cannot create partial sums; drop {','.join(created)} from the target's partial=[...]")
    cuts = subaxes.boundaries(mesh, src.used_axes() | dst.used_axes())
    scale = tie_scale(model, mesh.device_count, math.prod(src.shape))
    best = None
    budget = [SUB_AXIS_BUDGET]
    for refinement in _refinements(mesh, src, dst, cuts, sub_axes):
        # Sub-axes must save time (or bytes, for the bytes objective), not only break a tie: proving
        # that no plan on a finer mesh ties in time with fewer bytes would cost as much again.
        upper = None if best is None else best[1] // scale * scale - 1
        found = _plan_on(refinement, src, dst, model, size, upper, None if best is None else budget)
        if found is not None and (best is None or found[1] < best[1]):
            best = found
        if budget[0] <= 0:
            break
    if best is None:  # the first refinement (the mesh itself) is searched without a cap or budget
        raise InternalError(f"no plan from {src} to {dst} and no error saying why")
    steps = best[0]
    return Plan(mesh, src, dst, tuple(steps), dtype, model)


def _creates_partial(mesh: Mesh, src: DistType, dst: DistType) -> bool:
    """Whether ``dst`` is partial over some part of an axis over which ``src`` is not."""
    parts = subaxes.atoms(mesh, list(src.used_axes()) + list(dst.used_axes()))
    have = set(subaxes.expand(parts, src.partial))
    return any(a not in have for a in subaxes.expand(parts, dst.partial))


def _refinements(mesh: Mesh, src: DistType, dst: DistType, cuts: dict, sub_axes: bool):
    """The meshes of plain axes the search runs on, in order: the mesh cut only where the types need it,
    then (``sub_axes``) with one more axis cut in two, for each way of cutting each axis of composite size
    (see docs/redistribution.md for why one cut at a time). The likeliest cuts come first, since the
    budget may end the search before the others: axes whose place differs between the source and the
    target, cut into parts whose sizes divide, or are multiples of, the size of another axis or of a
    sub-axis the types use (a part that is to take another's place must match its size)."""
    yield Refinement(mesh, subaxes.splits_at(mesh, cuts))
    if not sub_axes:
        return
    tokens = {subaxes.size(mesh, a) for a in src.used_axes() | dst.used_axes() if subaxes.is_sub_axis(a)}
    others = {name: [k for a, k in mesh.axes if a != name and k > 1] + sorted(tokens) for name in mesh.axis_names}
    likely, rest = list[Any](), list[Any]()
    for name, n in mesh.axes:
        if n < 4 or len(subaxes.factors(n)) < 2:
            continue
        moved = _place(src, name) != _place(dst, name)
        if _place(src, name) is None and _place(dst, name) is None:
            continue  # an axis both types leave free: measured, a better plan once in 22, each try costly
        for pre in range(2, n):
            if n % pre or pre in cuts.get(name, ()):
                continue
            points = {k: set(v) for k, v in cuts.items()}
            points.setdefault(name, set()).add(pre)
            chain = sorted(points[name] | {1, n})
            if not all(b % a == 0 for a, b in zip(chain, chain[1:])):
                continue
            match = all(any(k % part == 0 or part % k == 0 for k in others[name]) for part in (pre, n // pre))
            (likely if moved and match else rest).append(points)
    for points in likely + rest:
        yield Refinement(mesh, subaxes.splits_at(mesh, points))


def _place(t: DistType, axis: str):
    """Where ``t`` puts ``axis``: (dim, the tokens of the dim from it on), "partial", or None (unused)."""
    for d, axes in enumerate(t.dims):
        for i, a in enumerate(axes):
            if subaxes.axis_name(a) == axis:
                return d, axes[i:]
    return "partial" if any(subaxes.axis_name(a) == axis for a in t.partial) else None


def _plan_on(refinement: Refinement, src: DistType, dst: DistType, model: CostModel, size: int,
             upper: int | None, budget: list | None = None) -> tuple[list[Step], int] | None:
    """(steps on the real mesh, search cost) of the best plan on ``refinement``'s mesh of plain axes, or
    None if none costs at most ``upper`` (or none is found within ``budget[0]`` units of search work, which
    is then decreased by the work done)."""
    fine = refinement.fine
    fine_src = DistType(src.shape, tuple(refinement.down_axes(d) for d in src.dims), refinement.down_axes(src.partial))
    fine_dst = DistType(dst.shape, tuple(refinement.down_axes(d) for d in dst.dims), refinement.down_axes(dst.partial))
    fine_src = DistType.of(fine, fine_src.shape, fine_src.dims, fine_src.partial)
    fine_dst = DistType.of(fine, fine_dst.shape, fine_dst.dims, fine_dst.partial)
    layout = Layout.get(fine, src.shape)
    red_src, red_dst = reduced(fine, fine_src), reduced(fine, fine_dst)
    token_of = refinement.part_token.get
    search_args: dict[str, Any] = dict(cost=model, itemsize=size, token_of=lambda a: token_of(a, a))
    found = _normal_form_moves(fine, layout, red_src, red_dst, search_args, upper, budget)
    relaxed = found is None
    if found is None:
        if upper is not None:
            return None
        # Divisibility can forbid every normal-form plan (a slice that would have to come first does not
        # divide the dim yet). Then allow any order, still capping every block at max(|src|, |dst|), and
        # only as a last resort at the whole array.
        cap = max(src.local_size(refinement.mesh), dst.local_size(refinement.mesh))
        found = PlanSearch(fine, layout, red_src, red_dst, cap=cap, **search_args).run()
        if found is None:
            found = PlanSearch(fine, layout, red_src, red_dst, cap=math.prod(src.shape), **search_args).run()
        if found is None:  # pragma: no cover - gather everything then slice always type-checks
            raise RedistributionError(f"no plan from {src} to {dst}")
    moves, score = found
    price, reorder = None, True
    if model.objective == "time":
        price = lambda axes, busiest: model.seconds([token_of(a, a) for a in axes], busiest * size)  # noqa: E731
        reorder = len({model.axis_figures(token_of(a, a)) for a in fine.axis_names if fine.size(a) > 1}) <= 1
    steps = _realise(fine, layout, fine_src, fine_dst, moves, relaxed, price, reorder)
    if not refinement.trivial:
        steps = [_lift(refinement, step) for step in steps]
    return steps, score


def _lift(refinement: Refinement, step: Step) -> Step:
    """A step on the refined mesh as a step on the real mesh (axes as tokens; same devices, same ranks)."""
    mesh = refinement.mesh
    t = step.type_after
    after = DistType(t.shape, tuple(refinement.up_axes(d) for d in t.dims),
                     subaxes.canonical_set(mesh, refinement.up_axes(t.partial, merge=False)))
    return step.lifted(refinement, after)


def _plan_within(mesh: Mesh, src: DistType, dst: DistType, dtype: str, frozen: tuple[str, ...],
                 model: CostModel, sub_axes: bool) -> Plan:
    """``plan`` on the sub-mesh of the axes not in ``frozen``, lifted to ``mesh`` (see ``plan``)."""
    for what, t in (("source", src), ("target", dst)):
        used = sorted(t.used_axis_names() & set(frozen))
        if used:
            raise RedistributionError(f"{what} {t} uses mesh axis '{used[0]}', along which devices hold different "
                                      "arrays; it cannot be redistributed over that axis")
    sub = mesh.without(frozen)
    if not sub.axes:
        return Plan(mesh, src, dst, (), dtype, model)
    inner = plan(sub, src, dst, dtype=dtype, cost=model, sub_axes=sub_axes)
    steps = [step.on_mesh(mesh, sub) for step in inner.steps]
    return Plan(mesh, src, dst, tuple(steps), dtype, model)


TOLERANCE = 0.005  # plans above the traffic lower bound are within this fraction of the least traffic
SUB_AXIS_BUDGET = 300  # search work (`PlanSearch.work` units) allowed for trying sub-axes, per plan
SETUP_WORK = 15  # what setting up a search on a refined mesh costs, in the same units (plus one per 64 devices)


def _normal_form_moves(mesh: Mesh, layout: Layout, src: DistType, dst: DistType, search_args: dict,
                       upper: int | None = None, budget: list | None = None) -> tuple[list, int] | None:
    """(Least-cost normal-form moves, their cost), or None if there is no normal-form plan (or none costs
    at most ``upper``).

    For the ``bytes`` objective, first an exact pass restricted to plans at the start's lower bound: it
    prunes every move that is not tight, so it is cheap, and it finds such a plan whenever one exists.
    Otherwise weighted A* with weight ``1 + TOLERANCE``: the bound is then out of reach, the heuristic
    often sits just below the least cost on many nodes (several ways to slice, all nearly as good), and
    proving exact optimality would mean expanding all of them; the weight skips that proof at a cost of at
    most 0.5% more traffic (measured: none on 900 random 4-axis cases, `benchmarks/planning.py`). For the
    ``time`` objective, exact A*: its permute bound is exact (any permute costs a whole block on its
    busiest device), which removes most of those plateaus."""
    search = PlanSearch(mesh, layout, src, dst, **search_args)
    limit = None if budget is None else budget[0]
    start = search.bounds.h(search.problem.src, 0)
    if upper is None or start <= upper:
        # (the time objective's second pass is exact A*, which finds such a plan as well; with ``upper``, a
        # plan on a refined mesh must beat a known one: the exact pass below is all either needs, the first
        # would only repeat part of it)
        found = search.run(upper=start, budget=limit) if upper is None and not search.problem.pricing.time else None
        if found is None and not search.exhausted:
            weight = 1.0 if search.problem.pricing.time else 1.0 + TOLERANCE
            found = search.run(weight=weight, upper=upper, budget=limit)
    else:
        found = None
    if budget is not None:
        budget[0] -= search.work + SETUP_WORK + mesh.device_count // 64
    return found


def reduced(mesh: Mesh, t: DistType) -> DistType:
    """The type without mesh axes of size 1 (they do not change any block)."""
    keep = lambda axes: tuple(a for a in axes if mesh.size(a) > 1)  # noqa: E731
    return DistType(t.shape, tuple(keep(d) for d in t.dims), keep(t.partial))


def permute_step(layout: Layout, before: DistType, after: DistType) -> Permute:
    """The permute realising ``before -> after`` that keeps every device already holding its new block in
    place (deterministic: the k-th moved holder of a block feeds its k-th moved needer, both ordered by
    their coordinates along the axes whose place the two types share, so that a pair differs only along
    axes the permute must use -- what the search priced it at)."""
    ids_before, ids_after = layout.block_ids(before), layout.block_ids(after)
    moved = np.nonzero(ids_before != ids_after)[0]
    weights_before, weights_after = _axis_weights(layout.mesh, before), _axis_weights(layout.mesh, after)
    same = tuple(a for a in layout.mesh.axis_names if weights_before.get(a, 0) == weights_after.get(a, 0))
    key = layout.group_index(same)[moved]
    senders = moved[np.lexsort((key, ids_before[moved]))]
    receivers = moved[np.lexsort((key, ids_after[moved]))]
    return Permute.between(senders, receivers, after)


def _axis_weights(mesh: Mesh, t: DistType) -> dict:
    """Each token's weight in a device's block id under ``t`` (see `Layout.ids_of`); a sub-axis also marks
    its whole axis as placed differently from any whole placement."""
    weights, radix = {}, 1
    for axis in reversed(t.partial):
        weights[axis] = radix
        radix *= subaxes.size(mesh, axis)
    for dim in reversed(t.dims):
        for axis in reversed(dim):
            weights[axis] = radix
            radix *= subaxes.size(mesh, axis)
    for axis in [a for a in weights if subaxes.is_sub_axis(a)]:
        weights[subaxes.axis_name(axis)] = -1
    return weights


def _realise(mesh: Mesh, layout: Layout, src: DistType, dst: DistType, moves: list,
             relaxed: bool = False, price=None, reorder: bool = True) -> list[Step]:
    """Turn reduced-type moves into steps on the real types (size-1 axes included), merged per dim."""
    steps: list[Step] = []
    current = src
    boundary = len(moves) if relaxed else next((i for i, m in enumerate(moves) if isinstance(m, GatherMove)),
                                               len(moves))
    trivial_partial = lambda t: tuple(a for a in t.partial if mesh.size(a) == 1)  # noqa: E731

    def push(step):
        nonlocal current
        after = apply_rule(step, current, mesh, layout)
        steps.append(step_with_type(step, after))
        current = after

    for i, move in enumerate(moves + [None]):
        if i == boundary:
            red = reduced(mesh, current)
            red_dst = reduced(mesh, dst)
            dims = tuple(g + r[len(rg):] for g, r, rg in zip(dst.dims, red.dims, red_dst.dims))
            middle_end = DistType(dst.shape, dims, dst.partial)
            if middle_end != current:
                if steps and steps[-1].relabels:
                    steps.pop()
                    current = steps[-1].type_after if steps else src
                    before = current
                else:
                    before = current
                push(permute_step(layout, before, middle_end))
        if move is None:
            break
        if isinstance(move, PermuteMove):
            red_dims, red_partial = move.target
            partial = tuple(sorted(set(red_partial) | set(trivial_partial(current)), key=mesh.axis_index))
            target = DistType(current.shape, red_dims, partial)
            if steps and steps[-1].relabels:  # merge consecutive permutes
                steps.pop()
                current = steps[-1].type_after if steps else src
            push(permute_step(layout, current, target))
        else:
            push(move.step(current))
    assert current == dst, (current, dst)
    return _merge(mesh, layout, src, steps, price, reorder)


def _merge(mesh: Mesh, layout: Layout, src: DistType, steps: list[Step], price=None,
           reorder: bool = True) -> list[Step]:
    """Order each run of slices (and, if ``reorder``, of gathers and reduce-scatters, whose order changes no
    byte count, nor any time when every axis has the same figures) by dim and merge steps of the same kind
    on the same dim (and runs of all-reduces) into one multi-axis collective, unless ``price`` (seconds of
    a step from its axes and its busiest device's elements; None for the bytes objective) says the merged
    step takes longer than the two (one axis on a slower link would slow the other's share down);
    re-derive the types. Merging never changes the bytes received. Then, where the order is free, put the
    largest groups where the blocks are smallest -- slices and reduce-scatters largest first, gathers
    largest last -- which lowers the peak (a step holds its input and its output block)."""

    def cheaper(parts: list, merged, before: DistType) -> bool:
        if price is None:
            return True
        current, separate = before, 0.0
        for part in parts:
            separate += price(part.mesh_axes, int(part.received(current, layout).max()))
            current = apply_rule(part, current, mesh, layout)
        return price(merged.mesh_axes, int(merged.received(before, layout).max())) <= separate

    out: list[Step] = []
    current = src
    i = 0
    while i < len(steps):
        j = i
        kind = type(steps[i])
        while j < len(steps) and type(steps[j]) is kind:
            j += 1
        run = steps[i:j]
        if kind.phase in (0, 2):  # slices, gathers, reduce-scatters: along one dim each
            dim_of = lambda s: s.tensor_dims()[0]  # noqa: E731
            free = kind.local or reorder  # else the search's order: it priced each step's block size
            if free:
                run = sorted(run, key=dim_of)
            merged: list = []
            before = current  # the type before merged[-1]
            at = current
            for s in run:
                s = step_with_type(s, apply_rule(s, at, mesh, layout))
                candidate = merged[-1].merged(s, mesh) if merged else None
                if candidate is not None:
                    prev = merged[-1]
                    if cheaper([prev, s], candidate, before):
                        merged[-1] = candidate
                        at = s.type_after
                        continue
                before = at
                merged.append(s)
                at = s.type_after
            run = merged
            if free and len(run) > 1:
                size = lambda s: subaxes.group_size(mesh, s.mesh_axes)  # noqa: E731
                run = sorted(run, key=size) if kind.phase == 2 else sorted(run, key=lambda s: -size(s))
        elif len(run) > 1:  # all-reduces: one over the union of the axes
            candidate = run[0]
            for s in run[1:]:
                candidate = candidate.merged(s, mesh) if candidate is not None else None
            if candidate is not None and cheaper(run, candidate, current):
                run = [candidate]
        for s in run:
            current = apply_rule(s, current, mesh, layout)
        out.extend(run)
        i = j
    current = src
    checked = []
    for s in out:
        after = apply_rule(s, current, mesh, layout)
        checked.append(step_with_type(s, after))
        current = after
    return checked


def naive_plan(mesh: Mesh, src: DistType, dst: DistType, *, dtype: str = "f32") -> Plan:
    """The baseline: all-reduce partial sums, all-gather every dim to replicated, then slice to ``dst``."""
    src = DistType.of(mesh, src.shape, src.dims, src.partial)
    dst = DistType.of(mesh, dst.shape, dst.dims, dst.partial)
    steps: list[Step] = []
    current = src
    layout = Layout.get(mesh, src.shape)

    def push(step):
        nonlocal current
        current = apply_rule(step, current, mesh, layout)
        steps.append(step_with_type(step, current))

    parts = subaxes.atoms(mesh, list(src.used_axes() | dst.used_axes()))
    kept = set(subaxes.expand(parts, dst.partial))
    resolve = subaxes.canonical_set(mesh, [a for a in subaxes.expand(parts, src.partial) if a not in kept])
    if resolve:
        push(AllReduce(resolve, current))
    for d, axes in enumerate(src.dims):
        if axes:
            push(AllGather(d, axes, current))
    for d, axes in enumerate(dst.dims):
        if axes:
            push(AllSlice(d, axes, current))
    if current != dst:  # only trivial partial axes can differ
        push(permute_step(layout, current, dst))
    return Plan(mesh, src, dst, tuple(steps), dtype)
