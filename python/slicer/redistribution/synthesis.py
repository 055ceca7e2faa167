"""Plan synthesis: the cheapest normal-form sequence of collectives from one distributed type to another.

Normal form: ``(all_slice | reduce_scatter)* (all_to_all | permute | all_reduce)* all_gather*`` -- blocks only
shrink, then keep their size, then grow, so every intermediate block is at most ``max(|src|, |dst|)`` and
``peak_bytes_per_device <= max(|src|, |dst|) + max_step min(|step input|, |step output|) <= 2 max(|src|, |dst|)``
(live bytes of a step = its input block + its output block).

Search: A* over (type, phase) states, phase 0 = shrinking, 1 = constant size, 2 = growing. Moves: slice one
unused axis onto a dim; reduce-scatter one partial axis onto a dim; all-reduce any set of partial axes;
all-to-all of any minor suffix of a dim (several axes at once) onto another dim; permute to *any* type of
the same local shape (one merged permute instead of several); gather a minor suffix, only if the result can
still reach the target by gathers. Cost model: total elements received over all devices, ties broken by
the number of steps. The heuristic -- elements of each device's target block it does not hold now (all of
them while a partial sum is unresolved) -- is a consistent lower bound, so the search returns a plan of
least traffic among normal-form plans, and reaches the global lower bound whenever a normal-form plan does.
Mesh axes of size 1 carry no data: the search ignores them and one free relabelling ``permute`` (no pairs)
puts them where the target wants them, merged with the last middle permute when there is one. The search is
deterministic (moves are generated in a fixed order and heap ties are broken by insertion order).
"""

from __future__ import annotations

import heapq
import itertools
from functools import lru_cache

import numpy as np

from .collectives import (AllGather, AllReduce, AllSlice, AllToAll, Permute, ReduceScatter, Step, apply_rule,
                          step_with_type)
from .errors import RedistributionError
from .layout import Layout
from .mesh import Mesh
from .plan import Plan
from .types import DistType, itemsize


def plan(mesh: Mesh, src: DistType, dst: DistType, *, dtype: str = "f32") -> Plan:
    """Synthesise the cheapest normal-form redistribution plan from ``src`` to ``dst`` on ``mesh``."""
    itemsize(dtype)
    src = DistType.of(mesh, src.shape, src.dims, src.partial)
    dst = DistType.of(mesh, dst.shape, dst.dims, dst.partial)
    if src.shape != dst.shape:
        raise RedistributionError(f"source shape {src.shape} and target shape {dst.shape} differ")
    created = [a for a in dst.partial if a not in src.partial and mesh.size(a) > 1]
    if created:
        raise RedistributionError(
            f"target {dst} is partial over {','.join(created)} but the source {src} is not: a redistribution "
            f"cannot create partial sums; drop {','.join(created)} from the target's partial=[...]")
    layout = Layout.get(mesh, src.shape)
    red_src, red_dst = _reduced(mesh, src), _reduced(mesh, dst)
    moves = _normal_form_moves(mesh, layout, red_src, red_dst)
    relaxed = moves is None
    if relaxed:
        # Divisibility can forbid every normal-form plan (a slice that would have to come first does not
        # divide the dim yet). Then allow any order, still capping every block at max(|src|, |dst|), and
        # only as a last resort at the whole array.
        cap = max(src.local_size(mesh), dst.local_size(mesh))
        found = _Search(mesh, layout, red_src, red_dst, cap=cap).run()
        if found is None:
            found = _Search(mesh, layout, red_src, red_dst, cap=int(np.prod(src.shape, dtype=np.int64))).run()
        if found is None:  # pragma: no cover - gather everything then slice always type-checks
            raise RedistributionError(f"no plan from {src} to {dst}")
        moves = found[0]
    steps = _realise(mesh, layout, src, dst, moves, relaxed)
    return Plan(mesh, src, dst, tuple(steps), dtype)


def _normal_form_moves(mesh: Mesh, layout: Layout, src: DistType, dst: DistType) -> list | None:
    """Least-traffic normal-form moves. A first pass restricted to one final permute gives an upper bound
    (often already at the lower bound); the full search then prunes everything above it."""
    first = _Search(mesh, layout, src, dst, final_permute_only=True)
    found = first.run()
    if found is not None and found[1] == first.h(first.src):
        return found[0]
    full = _Search(mesh, layout, src, dst).run(upper=None if found is None else found[1])
    if full is None:
        return None if found is None else found[0]
    return full[0]


def _reduced(mesh: Mesh, t: DistType) -> DistType:
    """The type without mesh axes of size 1 (they do not change any block)."""
    keep = lambda axes: tuple(a for a in axes if mesh.size(a) > 1)  # noqa: E731
    return DistType(t.shape, tuple(keep(d) for d in t.dims), keep(t.partial))


@lru_cache(maxsize=256)
def _types_by_signature(axes: tuple[tuple[str, int], ...], rank: int) -> dict:
    """All placements of ``axes`` (name, size) into ``rank`` ordered lists (or unused), by per-dim product."""
    placements = [tuple(() for _ in range(rank))]
    for name, _ in axes:
        grown = []
        for dims in placements:
            grown.append(dims)
            for d in range(rank):
                for pos in range(len(dims[d]) + 1):
                    new = dims[d][:pos] + (name,) + dims[d][pos:]
                    grown.append(dims[:d] + (new,) + dims[d + 1:])
        placements = grown
    sizes = dict(axes)
    groups: dict = {}
    for dims in placements:
        sig = []
        for d in dims:
            k = 1
            for a in d:
                k *= sizes[a]
            sig.append(k)
        groups.setdefault(tuple(sig), []).append(dims)
    return groups


class _Search:
    """A* over (state, phase); a state is ``(dims, partial)`` of a reduced type (tuples, for speed)."""

    def __init__(self, mesh: Mesh, layout: Layout, src: DistType, dst: DistType, cap: int | None = None,
                 final_permute_only: bool = False):
        self.mesh, self.layout = mesh, layout
        self.final_permute_only = final_permute_only  # cheap first pass: permute only onto dst + suffixes
        self._perm_groups: dict = {}
        self.shape = src.shape
        self.src, self.dst = (src.dims, src.partial), (dst.dims, dst.partial)
        self.cap = cap  # None: normal form; else any order with every block at most `cap` elements
        self.n = mesh.device_count
        self.axes = tuple(a for a in mesh.axis_names if mesh.size(a) > 1)
        self._sizes = {a: mesh.size(a) for a in mesh.axis_names}
        self._h: dict = {}
        self._local: dict = {}
        self.target_size = self.local(dst.dims)[1]

    def group(self, axes) -> int:
        k = 1
        for a in axes:
            k *= self._sizes[a]
        return k

    def local(self, dims: tuple) -> tuple[tuple[int, ...], int]:
        """(local shape, local element count) of a dims tuple, cached."""
        out = self._local.get(dims)
        if out is None:
            shape = tuple(s // self.group(d) for s, d in zip(self.shape, dims))
            count = 1
            for s in shape:
                count *= s
            out = self._local[dims] = (shape, count)
        return out

    def h(self, state) -> int:
        """Consistent lower bound on the elements still to receive (over all devices)."""
        value = self._h.get(state)
        if value is None:
            dims, partial = state
            full = self.n * self.target_size
            dst_partial = self.dst[1]
            if any(a not in dst_partial for a in partial):
                value = full
            else:
                value = full - int(self.layout.overlap_dims(dims, self.dst[0]).sum())
            self._h[state] = value
        return value

    def _gather_ok(self, dims: tuple, partial: tuple) -> bool:
        return partial == self.dst[1] and all(d[:len(g)] == g for d, g in zip(dims, self.dst[0]))

    def _permute_group(self, dims: tuple, partial: tuple):
        """Same-local-shape targets of a state: (dims list, ids matrix, heuristic vector), cached."""
        rank = len(dims)
        sig = tuple(self.group(d) for d in dims)
        key = (sig, partial)
        out = self._perm_groups.get(key)
        if out is None:
            avail = tuple((a, self._sizes[a]) for a in self.axes if a not in partial)
            targets = _types_by_signature(avail, rank).get(sig, [])
            if self.final_permute_only:
                targets = [t for t in targets if self._gather_ok(t, self.dst[1])]
            if targets:
                ids = np.stack([self.layout.ids_of(t, partial) for t in targets])
                hs = np.array([self.h((t, partial)) for t in targets], dtype=np.int64)
            else:
                ids = hs = None
            out = self._perm_groups[key] = (targets, ids, hs)
        return out

    def moves(self, state, phase: int, budget: int | None = None):
        """Yield (move, state_after, phase_after, cost in elements over all devices). Permute targets
        whose cost plus heuristic exceeds ``budget`` are not generated."""
        if self.cap is None:
            yield from self._moves(state, phase, budget)
            return
        for move, after, _, cost in self._moves(state, 0, budget):
            if self.local(after[0])[1] <= self.cap:
                yield move, after, 0, cost

    def _moves(self, state, phase: int, budget: int | None = None):
        dims, partial = state
        n = self.n
        size = self._sizes.__getitem__
        group = self.group
        local, L = self.local(dims)
        rank = len(dims)
        resolvable = [a for a in partial if a not in self.dst[1]]
        if phase == 0:
            used = {a for d in dims for a in d} | set(partial)
            free = [a for a in self.axes if a not in used]
            for d in range(rank):
                for a in free:
                    if local[d] % size(a) == 0:
                        yield ("slice", d, (a,)), (dims[:d] + (dims[d] + (a,),) + dims[d + 1:], partial), 0, 0
                for a in resolvable:
                    k = size(a)
                    if local[d] % k == 0:
                        after = (dims[:d] + (dims[d] + (a,),) + dims[d + 1:], tuple(p for p in partial if p != a))
                        yield ("reduce_scatter", d, (a,)), after, 0, n * (k - 1) * (L // k)
        if phase <= 1:
            for r in range(1, len(resolvable) + 1):
                for axes in itertools.combinations(resolvable, r):
                    k = group(axes)
                    after = (dims, tuple(p for p in partial if p not in axes))
                    yield ("all_reduce", axes), after, phase, n * -(-2 * (k - 1) * L // k)
            for d in range(rank):
                for cut in range(len(dims[d])):
                    axes = dims[d][cut:]
                    k = group(axes)
                    cost = n * (k - 1) * (L // k)
                    for e in range(rank):
                        if e != d and local[e] % k == 0:
                            new = list(dims)
                            new[d] = dims[d][:cut]
                            new[e] = dims[e] + axes
                            yield ("all_to_all", e, d, axes), (tuple(new), partial), 1, cost
            targets, ids, hs = self._permute_group(dims, partial)
            if targets:
                moved = np.count_nonzero(ids != self.layout.ids_of(dims, partial)[None, :], axis=1) * L
                keep = range(len(targets)) if budget is None else np.nonzero(moved + hs <= budget)[0]
                for i in keep:
                    other = targets[i]
                    if other != dims:
                        yield ("permute", (other, partial)), (other, partial), 1, int(moved[i])
        for d in range(rank):
            for cut in range(len(dims[d])):
                new = dims[:d] + (dims[d][:cut],) + dims[d + 1:]
                if self.cap is not None or self._gather_ok(new, partial):
                    yield ("all_gather", d, dims[d][cut:]), (new, partial), 2, n * (group(dims[d][cut:]) - 1) * L

    def run(self, upper: int | None = None) -> tuple[list, int] | None:
        """(least-cost move list, its cost) from source to target, or None if there is none with cost
        at most ``upper``."""
        start = (self.src, 0)
        best = {start: (0, 0)}
        parent: dict = {start: None}
        tie = itertools.count()
        heap = [((self.h(self.src), 0), 0, start)]
        closed = set()
        goal = self.dst
        while heap:
            _, _, node = heapq.heappop(heap)
            if node in closed:
                continue
            closed.add(node)
            state, phase = node
            g_bytes, g_steps = best[node]
            if state == goal:
                path = []
                while parent[node] is not None:
                    node, move = parent[node]
                    path.append(move)
                return path[::-1], g_bytes
            budget = None if upper is None else upper - g_bytes
            for move, after, phase2, cost in self.moves(state, phase, budget):
                nxt = (after, phase2)
                if nxt in closed:
                    continue
                g = (g_bytes + cost, g_steps + 1)
                if upper is not None and g[0] + self.h(after) > upper:
                    continue
                old = best.get(nxt)
                if old is None or g < old:
                    best[nxt] = g
                    parent[nxt] = (node, move)
                    heapq.heappush(heap, ((g[0] + self.h(after), g[1]), -next(tie), nxt))
        return None


def permute_pairs(layout: Layout, before: DistType, after: DistType) -> tuple[tuple[int, int], ...]:
    """A source->target device map realising ``before -> after`` that keeps every device already holding
    its new block in place (deterministic: the k-th moved holder of a block feeds its k-th moved needer)."""
    ids_before, ids_after = layout.block_ids(before), layout.block_ids(after)
    moved = np.nonzero(ids_before != ids_after)[0]
    senders = moved[np.argsort(ids_before[moved], kind="stable")]
    receivers = moved[np.argsort(ids_after[moved], kind="stable")]
    return tuple((int(s), int(r)) for s, r in zip(senders, receivers))


def _suffix_from(dims: tuple[str, ...], first: str) -> tuple[str, ...]:
    return dims[dims.index(first):]


def _realise(mesh: Mesh, layout: Layout, src: DistType, dst: DistType, moves: list,
             relaxed: bool = False) -> list[Step]:
    """Turn reduced-type moves into steps on the real types (size-1 axes included), merged per dim."""
    steps: list[Step] = []
    current = src
    boundary = len(moves) if relaxed else next((i for i, m in enumerate(moves) if m[0] == "all_gather"), len(moves))
    trivial_partial = lambda t: tuple(a for a in t.partial if mesh.size(a) == 1)  # noqa: E731

    def push(step):
        nonlocal current
        after = apply_rule(step, current, mesh, layout)
        steps.append(step_with_type(step, after))
        current = after

    for i, move in enumerate(moves + [None]):
        if i == boundary:
            red = _reduced(mesh, current)
            red_dst = _reduced(mesh, dst)
            dims = tuple(g + r[len(rg):] for g, r, rg in zip(dst.dims, red.dims, red_dst.dims))
            middle_end = DistType(dst.shape, dims, dst.partial)
            if middle_end != current:
                if steps and isinstance(steps[-1], Permute):
                    steps.pop()
                    current = steps[-1].type_after if steps else src
                    before = current
                else:
                    before = current
                push(Permute(permute_pairs(layout, before, middle_end), middle_end))
        if move is None:
            break
        kind = move[0]
        if kind == "slice":
            push(AllSlice(move[1], move[2], current))
        elif kind == "reduce_scatter":
            push(ReduceScatter(move[1], move[2], current))
        elif kind == "all_reduce":
            push(AllReduce(move[1], current))
        elif kind == "all_to_all":
            _, e, d, group = move
            push(AllToAll(e, d, _suffix_from(current.dims[d], group[0]), current))
        elif kind == "all_gather":
            _, d, group = move
            push(AllGather(d, _suffix_from(current.dims[d], group[0]), current))
        elif kind == "permute":
            red_dims, red_partial = move[1]
            partial = tuple(sorted(set(red_partial) | set(trivial_partial(current)), key=mesh.axis_index))
            target = DistType(current.shape, red_dims, partial)
            if steps and isinstance(steps[-1], Permute):  # merge consecutive permutes
                steps.pop()
                current = steps[-1].type_after if steps else src
            push(Permute(permute_pairs(layout, current, target), target))
    assert current == dst, (current, dst)
    return _merge(mesh, layout, src, steps)


def _merge(mesh: Mesh, layout: Layout, src: DistType, steps: list[Step]) -> list[Step]:
    """Order each run of slices (and of gathers) by dim and merge steps of the same kind on the same dim
    into one multi-axis collective; re-derive the types."""
    out: list[Step] = []
    i = 0
    while i < len(steps):
        j = i
        kind = type(steps[i])
        while j < len(steps) and type(steps[j]) is kind:
            j += 1
        run = steps[i:j]
        if kind in (AllSlice, AllGather, ReduceScatter):
            dim_of = lambda s: s.slice_axis if kind is AllSlice else (  # noqa: E731
                s.gather_axis if kind is AllGather else s.scatter_axis)
            run = sorted(run, key=dim_of)
            merged: list = []
            for s in run:
                if merged and dim_of(merged[-1]) == dim_of(s):
                    prev = merged.pop()
                    axes = prev.mesh_axes + s.mesh_axes if kind is not AllGather else s.mesh_axes + prev.mesh_axes
                    merged.append(kind(dim_of(s), axes, s.type_after))
                else:
                    merged.append(s)
            run = merged
        elif kind is AllReduce:
            axes = tuple(sorted({a for s in run for a in s.mesh_axes}, key=mesh.axis_index))
            run = [AllReduce(axes, run[-1].type_after)]
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

    resolve = tuple(a for a in current.partial if a not in dst.partial)
    if resolve:
        push(AllReduce(resolve, current))
    for d, axes in enumerate(src.dims):
        if axes:
            push(AllGather(d, axes, current))
    for d, axes in enumerate(dst.dims):
        if axes:
            push(AllSlice(d, axes, current))
    if current != dst:  # only trivial partial axes can differ
        push(Permute(permute_pairs(layout, current, dst), dst))
    return Plan(mesh, src, dst, tuple(steps), dtype)
