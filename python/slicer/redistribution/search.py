"""The A* search behind plan synthesis: states, moves, costs and the driver; the heuristic is a `bounds.Bounds`.

A state is ``(dims, partial)`` of a *reduced* type (mesh axes of size 1 dropped), as plain tuples so that
states hash fast; a search node adds the normal-form phase: 0 = shrinking (slices, reduce-scatters),
1 = constant block size (all-to-alls, permutes, all-reduces), 2 = growing (gathers). Costs are integers
from `costs.Pricing`: elements received summed over all devices (``bytes`` objective), or estimated time
then that sum (``time``).

A `PlanSearch` solves one `bounds.Problem` (source, target, mesh axes, layout, pricing, memory cap) and holds
the `bounds.Bounds` built from the same problem, which it asks for the heuristic of each node: the ``max``
of two consistent bounds, the traffic lower bound of the plan itself (*overlap*) and what all-to-alls and
permutes must still do (*structural*, which sees that blocks must change shape, which the overlap bound
does not, and keeps the search small when the traffic lower bound is out of reach). The search keeps the
moves and their memos, the bounds keep theirs; what both need to know of a node's dims (``info``, a
`_DimsTable`) is built once for both.

Details: docs/module-notes.md, `redistribution/search.py`.
"""

from __future__ import annotations

import functools
import gc
import heapq
import itertools
import math
from functools import lru_cache

import numpy as np

from slicer.core.mesh import Mesh

from .bounds import UNREACHABLE, Bounds
from .costs import CostModel
from .layout import Layout
from .moves import SWITCH, AllReduceMove, AllToAllMove, GatherMove, PermuteMove, ReduceScatterMove, SliceMove
from .problem import Problem
from .steps import AllGather, AllReduce, AllToAll, Permute, ReduceScatter
from .types import DistType

PERMUTES = "permutes"  # marks a queue entry standing for all the permute moves out of a node


@lru_cache(maxsize=4096)
def placements_with_products(axes: tuple[tuple[str, int], ...], products: tuple[int, ...]) -> tuple:
    """All placements of ``axes`` ((name, size), some possibly unused) into ordered per-dim lists whose
    group sizes are ``products``: the types a merged permute can reach. Depends on axis sizes only, so it
    is shared by every search on the same mesh. Built per product vector, by assigning each axis to a dim
    that its size still divides (or to none), then ordering each dim's axes every possible way."""
    rank = len(products)
    assignments = []
    rest = [1] * (len(axes) + 1)  # rest[i]: product of the sizes of axes[i:]
    for i in range(len(axes) - 1, -1, -1):
        rest[i] = rest[i + 1] * axes[i][1]

    def assign(i: int, remaining: tuple, chosen: tuple) -> None:
        if rest[i] % math.prod(remaining):
            return  # the axes left cannot make up what the dims still need
        if i == len(axes):
            assignments.append(chosen)
            return
        name, k = axes[i]
        assign(i + 1, remaining, chosen)
        for d in range(rank):
            if remaining[d] % k == 0:
                grown = chosen[:d] + (chosen[d] + (name,),) + chosen[d + 1:]
                assign(i + 1, remaining[:d] + (remaining[d] // k,) + remaining[d + 1:], grown)

    assign(0, products, tuple(() for _ in range(rank)))
    return tuple(dims for chosen in assignments
                 for dims in itertools.product(*(itertools.permutations(d) for d in chosen)))


def collector_paused(function):
    """Run ``function`` with Python's cyclic garbage collector paused. A search allocates tens of
    thousands of small tuples and no reference cycles (refcounting frees everything), yet each burst of
    allocations triggers collections that rescan the growing caches: about a third of the planning time
    on 4-axis meshes, measured (`synthesis.plan` pauses it for all its searches, which share nothing but
    would otherwise be rescanned between them). The collector's previous state is restored afterwards."""

    @functools.wraps(function)
    def paused(*args, **kwargs):
        if not gc.isenabled():
            return function(*args, **kwargs)
        gc.disable()
        try:
            return function(*args, **kwargs)
        finally:
            gc.enable()

    return paused


class _DimsInfo:
    """What every node with these ``dims`` shares, whatever its partial axes and phase. The successor
    lists are built on first expansion only (most nodes are generated but never expanded)."""

    __slots__ = ("dims", "local", "size", "products", "_unused", "_slices", "_moves")

    def __init__(self, problem: Problem, dims: tuple):
        self.dims = dims
        self.products = problem.products_of(dims)
        self.local = tuple(s // k for s, k in zip(problem.shape, self.products))
        self.size = math.prod(self.local)
        self._unused = self._slices = self._moves = None

    def unused(self, problem: Problem) -> tuple[str, ...]:
        """The non-trivial mesh axes of ``problem`` these dims do not use (only shrinking nodes ask)."""
        if self._unused is None:
            used = {a for d in self.dims for a in d}
            self._unused = tuple(a for a in problem.axes if a not in used)
        return self._unused

    def slices(self, search: PlanSearch) -> list:
        """(axis, move, dims after) for each unused axis sliced onto the minor end of a dim it divides
        (all a shrinking node needs). Without partial sums in the source, shrinking is slices only, and
        slices onto different dims commute; so they are taken in dim order -- none onto a dim below the
        last dim the source was extended on. Every extension is still reached, by one path instead of
        many, which saves generating the same node again and again."""
        if self._slices is None:
            problem = search.problem
            dims, rank = self.dims, len(self.dims)
            first = 0
            if not problem.src[1]:
                first = max((d for d in range(rank) if len(dims[d]) > len(problem.src[0][d])), default=0)
            self._slices = [(a, SliceMove(d, (a,)), dims[:d] + (dims[d] + (a,),) + dims[d + 1:])
                            for d in range(first, rank) for a in self.unused(problem)
                            if self.local[d] % problem.sizes[a] == 0]
        return self._slices

    def moves(self, search: PlanSearch) -> tuple[list, list]:
        """(all-to-alls, gathers) out of these dims:

        - all-to-alls: (move, dims after, cost) -- a minor suffix of dim d onto the minor end of dim e, in
          its own order or, if different, reordered as the target wants it on dim e (``target_order``);
        - gathers: (move, dims after, cost, whether gathers can still reach the target) -- a minor suffix.
        """
        if self._moves is None:
            problem = search.problem
            dims, sizes, n, L = self.dims, problem.sizes, problem.n, self.size
            cost = problem.pricing.cost
            targets = problem.dst[0]
            rank = len(dims)
            # Gathering a suffix of dim d keeps the target reachable iff every other dim already starts
            # with its target's axes and dim d still does after the cut.
            starts = [axes[:len(g)] == g for axes, g in zip(dims, targets)]
            wrong = starts.count(False)
            all_to_alls, gathers = [], []
            for d in range(rank):
                others_start = wrong == 0 or (wrong == 1 and not starts[d])
                row = dims[d]
                groups = [1] * (len(row) + 1)  # groups[cut]: devices in a group over row[cut:]
                for cut in range(len(row) - 1, -1, -1):
                    groups[cut] = groups[cut + 1] * sizes[row[cut]]
                for cut in range(len(row)):
                    axes, k = row[cut:], groups[cut]
                    kept = dims[:d] + (row[:cut],) + dims[d + 1:]
                    extends = others_start and starts[d] and cut >= len(targets[d])
                    gathered = AllGather.busiest(k, L)
                    gathers.append((GatherMove(d, axes), kept, cost(axes, gathered, n * gathered), extends))
                    busiest = AllToAll.busiest(k, L)
                    price = cost(axes, busiest, n * busiest)
                    for e in range(rank):
                        if e != d and self.local[e] % k == 0:
                            after = kept[:e] + (kept[e] + axes,) + kept[e + 1:]
                            all_to_alls.append((AllToAllMove(e, d, axes), after, price))
                            if len(axes) > 1:
                                order = search.target_order(e, axes)
                                if order != axes:
                                    after = kept[:e] + (kept[e] + order,) + kept[e + 1:]
                                    all_to_alls.append((AllToAllMove(e, d, axes, order), after, price))
            self._moves = (all_to_alls, gathers)
        return self._moves


class _DimsTable(dict):
    """dims -> their `_DimsInfo`, built on first lookup: what a search and its bounds know of each dims
    they meet. It refers to the problem only, never to the search, so that a search holds no reference
    cycle and is freed as soon as it is dropped, even while the collector is paused (`collector_paused`)."""

    __slots__ = ("problem",)

    def __init__(self, problem: Problem):
        super().__init__()
        self.problem = problem

    def __missing__(self, dims: tuple) -> _DimsInfo:
        out = self[dims] = _DimsInfo(self.problem, dims)
        return out


class PlanSearch:
    """A* over normal-form plans from ``src`` to ``dst`` (reduced types), or, with ``cap``, over plans in
    any order whose blocks never exceed ``cap`` elements. ``informed=False`` drops the heuristic
    (uniform-cost search; the tests compare the two). What it solves is ``problem`` (a `bounds.Problem`),
    its heuristic ``bounds`` (a `bounds.Bounds` of the same problem)."""

    def __init__(self, mesh: Mesh, layout: Layout, src: DistType, dst: DistType, cap: int | None = None,
                 informed: bool = True, cost: CostModel | None = None, itemsize: int = 4, token_of=None):
        self.problem = problem = Problem.of(mesh, layout, src, dst, cap, informed, cost, itemsize, token_of)
        self.permute_phase = 1 if cap is None else 0  # the capped search has one phase
        self.expanded, self.exhausted = 0, False
        self.info = _DimsTable(problem)  # for the moves and the bounds
        self._orders: dict = {}  # (dim, axes) -> target_order
        self._perm_groups: dict = {}  # (products, partial) -> _permute_group
        axes = problem.axes
        self._coords = np.stack([layout.coords[a] for a in axes]) if axes else np.zeros((0, problem.n), np.int64)
        self.bounds = Bounds(problem, self.info)  # (no reference back to the search: see _DimsTable)

    @property
    def work(self) -> int:
        """What the search has done so far, deterministically, in units of about one bounded node: the dims it
        described (``info``, 3 units each) plus the work of its `bounds` (nodes
        bounded, per-device overlap bounds, reachable block sizes and products bounded: `Bounds.work`).
        Weights from least-squares fits of CPU time on these counts over 900 searches (R^2 = 0.92), the
        last one raised where a fit on searches with many partial sums needed it."""
        return self.bounds.work + 3 * len(self.info)

    # -- per-dims facts -------------------------------------------------------------------------------

    def target_order(self, e: int, axes: tuple) -> tuple:
        """``axes`` in the order a reordering all-to-all appends them to dim ``e``: those the target
        places on dim ``e`` first, in the target's order, then the others in their own order."""
        key = (e, axes)
        out = self._orders.get(key)
        if out is None:
            wanted = self.problem.dst[0][e]
            first = sorted((a for a in axes if a in wanted), key=wanted.index)
            out = self._orders[key] = tuple(first) + tuple(a for a in axes if a not in wanted)
        return out

    def _permute_group(self, products: tuple, partial: tuple):
        """Targets of a merged permute from a node -- all types with the same local shape and partial
        axes -- with each target's block index per device, one row per target, and each target's row
        (cached per products; the node itself is one of the targets)."""
        key = (products, partial)
        out = self._perm_groups.get(key)
        if out is None:
            avail = tuple((a, self.problem.sizes[a]) for a in self.problem.axes if a not in partial)
            targets = placements_with_products(avail, products)
            weights = self._weights(targets, products) if len(targets) > 1 else None
            ids = weights @ self._coords if weights is not None else None
            out = self._perm_groups[key] = (targets, ids, {t: i for i, t in enumerate(targets)}, weights)
        return out

    def _block_index(self, types: tuple, products: tuple) -> np.ndarray:
        """Row ``i``: each device's block index under ``types[i]`` (see ``_weights``)."""
        return self._weights(types, products) @ self._coords

    def _weights(self, types: tuple, products: tuple) -> np.ndarray:
        """Row ``i``: the weight of each axis in each device's block index under ``types[i]`` (all with
        per-dim group sizes ``products``), mixed-radix over dims. Two types with the same products and partial axes give
        a device the same block iff its indices agree (the partial axes' coordinates are common to both).
        The index is linear in the devices' axis coordinates, so all rows are one integer matrix product:
        (weight of each axis in each type) x (each device's coordinate along each axis)."""
        axes, sizes = self.problem.axes, self.problem.sizes
        column = {a: i for i, a in enumerate(axes)}
        weights = np.zeros((len(types), len(axes)), dtype=np.int64)
        for row, dims in enumerate(types):
            radix = 1
            for d in range(len(products) - 1, -1, -1):
                for a in reversed(dims[d]):
                    weights[row, column[a]] = radix
                    radix *= sizes[a]
        return weights

    def moves(self, state, phase: int, permuted: bool = False):
        """Yield (move, state after, phase after, cost). No permutes from a node reached by a permute
        (``permuted``): a permute's cost is the Hamming distance between the two types' per-device block
        indices, so one permute straight to the final target never costs more than two in a row."""
        cap = self.problem.cap
        if cap is None:
            yield from self._moves(state, phase, permuted)
            return
        for move, after, _, cost in self._moves(state, 0, permuted):
            if self.info[after[0]].size <= cap:
                yield move, after, 0, cost

    def _moves(self, state, phase: int, permuted: bool):
        dims, partial = state
        problem = self.problem
        info = self.info[dims]
        n, L, rank, sizes = problem.n, info.size, len(dims), problem.sizes
        cost = problem.pricing.cost
        resolvable = [a for a in partial if a not in problem.dst[1]]
        if phase <= 1:
            for r in range(1, len(resolvable) + 1):
                for axes in itertools.combinations(resolvable, r):
                    k = math.prod(sizes[a] for a in axes)
                    after = (dims, tuple(p for p in partial if p not in axes))
                    busiest = AllReduce.busiest(k, L)
                    yield AllReduceMove(axes), after, phase, cost(axes, busiest, n * busiest)
        if phase == 0:
            for axis, move, after in info.slices(self):
                if axis not in partial:
                    yield move, (after, partial), 0, 0
            # A reduce_scatter over several partial axes at once (in each order: the first the major tiles) is one
            # collective: two in a row pay the latency twice, which made an all_reduce and a local slice look
            # cheaper for blocks of tens of KB (FSDP's weight gradients on 2x2, at twice the bytes of this one).
            for d in range(rank):
                for r in range(1, len(resolvable) + 1):
                    for axes in itertools.permutations(resolvable, r):
                        k = math.prod(sizes[a] for a in axes)
                        if info.local[d] % k == 0:
                            after = (dims[:d] + (dims[d] + axes,) + dims[d + 1:],
                                     tuple(p for p in partial if p not in axes))
                            busiest = ReduceScatter.busiest(k, L)
                            yield ReduceScatterMove(d, axes), after, 0, cost(axes, busiest, n * busiest)
            if problem.cap is None:
                # Stop shrinking: the constant-size moves hang off the phase-1 twin of this node, whose
                # heuristic (no more slices) is usually far above this one's, so they are generated only
                # for the few shrinking nodes worth going on from.
                yield SWITCH, state, 1, 0
                return
        all_to_alls, gathers = info.moves(self)
        if phase <= 1:
            for move, after, cost in all_to_alls:
                yield move, (after, partial), 1, cost
            if not permuted and not problem.informed:  # else queued behind a hub
                yield from self.permute_moves(state, self.permute_phase)
        capped = problem.cap is not None
        gather_ok = capped or partial == problem.dst[1]
        for move, after, cost, extends in gathers:
            if capped or (gather_ok and extends):
                yield move, (after, partial), 2, cost

    def permute_moves(self, state, phase: int = 1):
        """Yield the merged-permute moves out of a constant-size node (or any node of the capped search,
        which has one phase, 0): to every other type with the same local shape and partial axes, costing a
        block per device whose block changes (the busiest device receives a whole block)."""
        dims, partial = state
        info = self.info[dims]
        targets, ids, row, weights = self._permute_group(info.products, partial)
        if ids is not None:
            L = Permute.busiest(2, info.size)  # the busiest device receives a whole block
            pricing, all_axes = self.problem.pricing, self.problem.axes
            price = pricing.cost
            moved = np.count_nonzero(ids != ids[row[dims]], axis=1).tolist()
            if pricing.uniform or not pricing.time:
                axes = all_axes[:1]
                for other, count in zip(targets, moved):
                    if other != dims:
                        yield PermuteMove((other, partial)), (other, partial), phase, price(axes, L, count * L)
            else:  # the axes whose place changes, whose links the permute uses
                changed = weights != weights[row[dims]]
                for i, (other, count) in enumerate(zip(targets, moved)):
                    if other != dims:
                        axes = tuple(a for a, c in zip(all_axes, changed[i]) if c) or all_axes[:1]
                        yield PermuteMove((other, partial)), (other, partial), phase, price(axes, L, count * L)

    # -- the search -----------------------------------------------------------------------------------

    @collector_paused
    def run(self, weight: float = 1.0, upper: int | None = None, budget: int | None = None) -> tuple[list, int] | None:
        """(least-cost move list, its cost) from source to target, or None if the target is unreachable
        or, with ``upper``, if every plan costs more than ``upper``. Ties in cost go to fewer steps, then
        to the move generated last (deterministic). With ``weight`` above 1 the heuristic is inflated by
        it (weighted A*, no re-expansions): the plan costs at most ``weight`` times the least, and plateaus
        of nodes whose bounds are within that factor of the least cost are no longer all expanded. With
        ``budget``, give up (None, and ``exhausted`` set) once ``work`` exceeds it."""
        problem, bounds = self.problem, self.bounds
        start = (problem.src, 0)
        best = {start: (0, 0)}
        parent: dict = {start: None}
        tie = itertools.count()
        # Costs are exact integers (possibly beyond 64 bits): inflate them in integers, never in floats.
        scaled = round((weight - 1.0) * 1_000_000)
        inflate = (lambda value: value) if scaled <= 0 else (lambda value: value + value * scaled // 1_000_000)
        heap = [(inflate(bounds.h(problem.src, 0)), 0, 0, start, True)]
        closed = set()
        goal = problem.dst
        push, pop = heapq.heappush, heapq.heappop
        cheap = bounds.cheap_h
        successors = self._moves if problem.cap is None else self.moves
        hubs, hub_phase = problem.informed, self.permute_phase  # permutes queued behind hubs, and their phase
        while heap:
            f, _, _, node, evaluated = pop(heap)
            if node[0] is PERMUTES:  # a hub: now generate the permutes of the node it stands for
                node = node[1]
                g_bytes, g_steps = best[node]
                moves = self.permute_moves(node[0], hub_phase)
            else:
                if node in closed:
                    continue
                g_bytes, g_steps = best[node]
                moves = None
            if moves is None and not evaluated:  # lazy: queued under the structural bound only
                h_full = bounds.h(*node)
                if upper is not None and g_bytes + h_full > upper:
                    continue
                f_full = g_bytes + inflate(h_full)
                if f_full > f:
                    push(heap, (f_full, g_steps, -next(tie), node, True))
                    continue
            state, phase = node
            if moves is None:
                closed.add(node)
                self.expanded += 1
                if budget is not None and self.work > budget:
                    self.exhausted = True
                    return None
                if state == goal:
                    path = []
                    while parent[node] is not None:
                        node, move = parent[node]
                        if move is not SWITCH:
                            path.append(move)
                    return path[::-1], g_bytes
                permuted = parent[node] is not None and type(parent[node][1]) is PermuteMove
                moves = successors(state, phase, permuted)
                if hubs and phase == hub_phase and not permuted:
                    # Permutes wait behind one queue entry keyed by a bound on all of them: most
                    # nodes' hubs never reach the front, which saves building their permute targets.
                    least_move, least_h = bounds.permute_floor_key(state)
                    if least_h < UNREACHABLE and (upper is None or g_bytes + least_move + least_h <= upper):
                        push(heap, (g_bytes + least_move + inflate(least_h), g_steps + 1, -next(tie),
                                    (PERMUTES, node), True))
            for move, after, phase2, cost in moves:
                nxt = (after, phase2)
                if nxt in closed:
                    continue
                g = (g_bytes + cost, g_steps + (move is not SWITCH))
                old = best.get(nxt)
                if old is not None and g >= old:
                    continue
                h_after = cheap(after, phase2)
                if h_after >= UNREACHABLE or (upper is not None and g[0] + h_after > upper):
                    continue
                best[nxt] = g
                parent[nxt] = (node, move)
                push(heap, (g[0] + inflate(h_after), g[1], -next(tie), nxt, False))
        return None
