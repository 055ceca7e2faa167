"""The admissible bounds of the plan search (the A* heuristic), kept apart from the moves and the driver.

Every bound is computed on two quantities, each consistent on its own: the elements still to be received by all
devices together (*total*, what the ``bytes`` objective minimises and the ``time`` objective uses to break ties),
and by the busiest device summed over the remaining steps (*busiest*, what ``time`` pays for), plus the number of
communicating steps still needed (*steps*, each paying a latency); `costs.Pricing` combines them into the
search's scalar cost. Two consistent bounds, combined by ``max``:

- *overlap*: the elements of each device's target block it does not hold now (all of them while a partial sum
  the target does not keep is unresolved) -- the traffic lower bound of the plan itself;
- *structural*: all-to-alls must change the per-dim group products (`group_products.py`) and, since they move
  minor suffixes only, clear every dim's wrongly placed suffix (`dim_order.py`) unless a permute, never cheap,
  reorders it (``_middle_bound``); shrinking nodes also bound what resolving partial sums will cost.

`Bounds` is built from the `Problem` it shares with `search.PlanSearch` and the search's per-dims facts (``info``, a
table shared with it), and keeps its caches to itself.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping

from .dim_order import DimOrder
from .group_products import GroupProducts
from .problem import Problem

UNREACHABLE = 1 << 200  # heuristic value of a state from which the target cannot be reached (above any cost)
NONE = (float(UNREACHABLE), UNREACHABLE, 0)  # (busiest, total, steps) of such a state
EXACT_RESOLUTIONS = 2  # shrinking nodes with more unresolved partial axes bound their resolution choice-free


def whole(x: float) -> int:
    """The least integer that is at least ``x``, but for floating-point rounding: the bounds are computed
    as fractions in floating point, whereas the costs they bound are whole numbers of elements. Rounding
    up (after a margin far above the rounding error) keeps a bound that is a whole number in exact
    arithmetic exactly that number, which matters: a bound a hair below the cost of the best plan would
    leave every node on every equally good plan below it, all to be expanded. Consistent, since the
    costs added along a move are whole numbers."""
    return max(0, math.ceil(x - abs(x) * 1e-12 - 1e-9))


class Bounds:
    """The heuristic of a `search.PlanSearch`: consistent lower bounds on the cost still to pay from a node of
    ``problem``. ``info[dims]`` is what every node with these dims shares, of which the bounds read
    ``products``, ``size`` and ``unused(problem)``: the search's table, built on demand for both, since
    they ask about the same dims (and its `work` counts each once)."""

    def __init__(self, problem: Problem, info: Mapping):
        self.problem, self.info = problem, info
        self.target_size = info[problem.dst[0]].size
        self._target_axes = {a for d in problem.dst[0] for a in d} | set(problem.dst[1])
        sizes = sorted(problem.sizes[a] for a in problem.axes)
        self.permute_floor = 1.0 - 1.0 / sizes[1] if len(sizes) > 1 else 1.0  # see _middle_bound
        self._uninformed = problem.cap is not None or not problem.informed
        self.products = GroupProducts(problem, info, self._target_axes)
        self.order = DimOrder(problem, self._target_axes)
        # memos, each keyed by what its bound depends on
        self._overlap_h: dict = {}  # state -> overlap_pair
        self._cheap: dict = {}  # (state, phase) -> cheap_h
        self._constant_h: dict = {}  # state -> constant_size_bound
        self._resolution: dict = {}  # partial -> resolution
        self._shrinking_h: dict = {}  # (products, slices, unresolved, leaving part) -> shrinking_bound
        self._shrinking_state_h: dict = {}  # state -> shrinking_bound

    @property
    def work(self) -> int:
        """The bounds' share of `search.PlanSearch.work`, in the same units (about one bounded node each): nodes
        bounded, per-device overlap bounds (a unit per 64 devices) and the products bound's (`GroupProducts.work`)."""
        return len(self._cheap) + len(self._overlap_h) * max(1, self.problem.n // 64) + self.products.work

    def overlap_pair(self, state) -> tuple[int, int]:
        """(busiest, total): the elements of its target block the neediest device does not hold, and that
        all devices together do not hold (every target element while an unwanted partial sum is
        unresolved): the traffic lower bound. Consistent: a step receiving ``c`` elements in total (``b``
        on its busiest device) raises the devices' overlap with their targets by at most ``c`` (and each
        device's by at most ``b``)."""
        value = self._overlap_h.get(state)
        if value is None:
            dims, partial = state
            problem = self.problem
            if any(a not in problem.dst[1] for a in partial):
                value = (self.target_size, problem.n * self.target_size)
            else:
                missing = self.target_size - problem.layout.overlap_dims(dims, problem.dst[0])
                value = (int(missing.max()), int(missing.sum()))
            self._overlap_h[state] = value
        return value

    def overlap_bound(self, state) -> int:
        """The overlap bound in the search's cost units."""
        return self.problem.pricing.bound(*self.overlap_pair(state))

    def _elements(self, L: int, fraction: float) -> int:
        """``n L fraction`` as an integer lower bound on a number of elements (see `whole`)."""
        return whole(self.problem.n * L * fraction)

    def _middle_bound(self, moved_products: float, order: float, floor: float | None = None) -> float:
        """Combine the products bound with the order bound (fractions of ``n L``): a plan without
        permutes pays the order bound; one with a permute pays the products bound plus the cheapest
        permute. A permute between two types changes the place (dim, or weight within the dim) of at
        least two axes -- one alone cannot move without changing some dim's group size or another axis's
        weight -- and for fixed other coordinates at most one of a changed axis's ``s`` coordinates gives
        a device the same block, so it moves all devices but a ``1/s`` share, ``s`` at least the second
        smallest axis size. For the busiest device (``floor=1``) any permute costs a whole block."""
        floor = self.permute_floor if floor is None else floor
        return max(moved_products, min(order, moved_products + floor))

    def resolution(self, partial: tuple) -> tuple[tuple[str, ...], float]:
        """(the partial axes the target does not keep, the least cost of resolving them all as a fraction
        of ``n L``, ``L`` the block size once the shrinking phase ends).

        An all-reduce over a group of ``K`` devices costs ``2 (1 - 1/K)`` of the block it runs on, and
        ``1 - 1/K`` is subadditive over products, so several all-reduces cost at least one over all the
        axes together. A reduce-scatter over ``k`` costs ``(k - 1)`` of its output block, at least ``2 (1 -
        1/k)`` of it. Blocks never shrink after the shrinking phase, so either is at least that share of
        ``n L``: ``2 (1 - 1/K)`` for the product ``K`` of the unresolved axes' sizes."""
        out = self._resolution.get(partial)
        if out is None:
            unresolved = tuple(a for a in partial if a not in self.problem.dst[1])
            out = self._resolution[partial] = (unresolved, 2.0 * (1.0 - 1.0 / self.problem.group(unresolved)))
        return out

    def constant_size_bound(self, state) -> tuple[float, int, int]:
        """(busiest, total, steps) bound of a constant-size (phase >= 1) node: all-to-all and permute
        traffic (see ``GroupProducts.cost``, ``DimOrder``, ``_middle_bound``), the all-reduce its unresolved
        partial sums still need (``resolution``: only an all-reduce can resolve them now, and it changes
        no dim, so its cost adds to the others), then the gathers, which cost exactly ``n (T - L)``
        (``T - L`` on every device). Every part drops by at most the cost of the move taken, so it is
        consistent. All these collectives but the permute give every device the same share.

        Steps: one all-to-all or permute if the middle part is positive (gathers cannot fix what it
        counts: the gathers the search allows only drop axes the target leaves free), one gather if the
        block must grow, one all-reduce if partial sums are unresolved -- three kinds of step, each move
        being one of them, so the count drops by at most one per step."""
        value = self._constant_h.get(state)
        if value is None:
            dims, partial = state
            products, total, out, into = [], 1, 0.0, 0.0
            per_dim = self.order.per_dim
            for d, axes in enumerate(dims):
                facts = per_dim[d].get(axes) or self.order.facts(d, axes)
                products.append(facts[0])
                total *= facts[0]
                out += facts[1]
                into += facts[2]
            moved = self.products.cost(tuple(products))
            if moved == math.inf:
                value = NONE
            else:
                L = self.problem.elements // total
                order = out if out > into else into
                resolve = self.resolution(partial)[1]
                growth = self.target_size - L
                middle = self._middle_bound(moved, order, 1.0)
                n = self.problem.n
                value = (growth + L * (middle + resolve),
                         n * growth + self._elements(L, self._middle_bound(moved, order) + resolve),
                         (middle > 0) + (growth > 0) + (resolve > 0))
            self._constant_h[state] = value
        return value

    def shrinking_bound(self, dims: tuple, partial: tuple) -> tuple[float, int, int]:
        """(busiest, total, steps) bound of a shrinking-phase (phase 0) node: the least constant-size bound over
        the products it can still reach by slicing unused axes (relaxed to cost 0) or reduce-scattering
        unresolved partial axes, with the order bound's leaving part (slices append, so they never
        shorten a dim's wrong suffix) or its entering part relaxed for the slices still possible
        (``DimOrder.entering_after_slices``), plus the cost of resolving the partial sums.

        That last cost depends on how each unresolved axis is resolved: reduce-scattered onto a dim
        (which appends it, and costs ``k - 1`` times an output block, at least ``(k - 1) L`` for the block
        size ``L`` at the end of the shrinking phase) or all-reduced with the others left (``2 (1 - 1/K)``
        of at least ``L``). With up to ``EXACT_RESOLUTIONS`` such axes every choice is bounded apart;
        with more, the choice-free bound of ``resolution``. Each move narrows the choices and lowers the
        resolution term by at most its own cost, so the bound stays consistent (each of its parts is the
        least over the choices on its own). Steps: as for a constant-size node, plus one reduce-scatter
        per dim a choice reduce-scatters onto."""
        info = self.info[dims]
        unused = info.unused(self.problem)
        unresolved, resolve_all = self.resolution(partial)
        slices = tuple(a for a in unused if a not in partial)
        addable = tuple(a for a in unused if a in slices or a in unresolved)
        out = max(self.order.leaving_entering(dims)[0], self.order.entering_after_slices(dims, addable))
        key = (info.products, slices, unresolved, out)
        value = self._shrinking_h.get(key)
        if value is None:
            busiest, total, steps = NONE
            steps = 1 << 30
            if len(unresolved) > EXACT_RESOLUTIONS:
                choices = [(info.products, addable, resolve_all, 1)]
            else:
                # axes left to the all-reduce may be sliced once it has run (it may run while shrinking)
                choices = [(products, slices + left, extra, count)
                           for products, extra, count, left in self._resolution_choices(info.products, unresolved)]
            n = self.problem.n
            for products, free, extra, count in choices:
                for L, moved in self.products.reachable_sizes(products, free):
                    growth = self.target_size - L
                    middle = self._middle_bound(moved, out, 1.0)
                    total = min(total, n * growth + self._elements(L, self._middle_bound(moved, out) + extra))
                    busiest = min(busiest, growth + L * (middle + extra))
                    steps = min(steps, count + (middle > 0) + (growth > 0))
            value = self._shrinking_h[key] = (busiest, total, 0 if steps == 1 << 30 else steps)
        return value

    def _resolution_choices(self, products: tuple, unresolved: tuple) -> list:
        """(products after the reduce-scatters, resolution cost as a fraction of ``n L``, steps, the axes left
        to the all-reduce) for each way of resolving ``unresolved``: each axis reduce-scattered onto one of
        the dims (one step per dim: a reduce-scatter may take several axes at once) or left to one all-reduce
        (one step for all of them)."""
        out = []
        rank, sizes = len(products), self.problem.sizes
        for where in itertools.product(range(-1, rank), repeat=len(unresolved)):
            grown, scattered, reduced = list(products), 0.0, 1
            for a, d in zip(unresolved, where):
                k = sizes[a]
                if d < 0:
                    reduced *= k
                else:
                    grown[d] *= k
                    scattered += k - 1
            steps = len({d for d in where if d >= 0}) + (reduced > 1)  # axes onto one dim: one reduce-scatter
            left = tuple(a for a, d in zip(unresolved, where) if d < 0)
            out.append((tuple(grown), scattered + 2.0 * (1.0 - 1.0 / reduced), steps, left))
        return out

    def structural_pair(self, state, phase: int) -> tuple[float, int, int]:
        """(busiest, total, steps) of the structural bound (see ``cheap_h``)."""
        if self._uninformed:
            capped_and_informed = self.problem.cap is not None and self.problem.informed
            return self.growth_pair(state[0]) if capped_and_informed else (0, 0, 0)
        if phase:
            value = self._constant_h.get(state)
            return value if value is not None else self.constant_size_bound(state)
        value = self._shrinking_state_h.get(state)
        if value is None:  # shrinking_bound's own cache is keyed by what it depends on, costlier to build
            value = self._shrinking_state_h[state] = self.shrinking_bound(*state)
        return value

    def cheap_h(self, state, phase: int) -> int:
        """The structural part of the heuristic, in cost units: dictionary lookups once the search is warm."""
        key = (state, phase)
        value = self._cheap.get(key)
        if value is None:
            pair = self.structural_pair(state, phase)
            value = UNREACHABLE if pair[1] >= UNREACHABLE else self.problem.pricing.bound(*pair)
            self._cheap[key] = value
        return value

    def growth_pair(self, dims: tuple) -> tuple[int, int, int]:
        """The structural bound of the capped search (steps in any order): only gathers grow a block, a
        gather from ``L`` to ``k L`` costs ``n (k L - L)``, so a block smaller than the target's must still
        receive ``n (T - L)`` (``T - L`` on every device). Consistent: a gather lowers it by at most its
        cost, other moves keep or raise it."""
        growth = max(0, self.target_size - self.info[dims].size)
        return growth, self.problem.n * growth, int(growth > 0)

    def permute_floor_key(self, state) -> tuple[int, int]:
        """(least cost of any permute out of ``state``, least heuristic of its targets): the key of the
        search's queue entry standing for all those permutes. Every permute moves at least ``1 - 1/s`` of
        the devices (``_middle_bound``), and a whole block to its busiest device; its targets share the
        node's products and partial sums, hence at least their products and resolution bounds (in the
        capped search: their block size, hence its growth bound)."""
        dims, partial = state
        problem = self.problem
        bound = problem.pricing.bound
        if problem.cap is not None:
            L = self.info[dims].size
            return bound(L, self._elements(L, self.permute_floor)), self.cheap_h(state, 0)
        p = problem.products_of(dims)
        moved = self.products.cost(p)
        L = problem.elements // math.prod(p)
        if moved == math.inf:
            return UNREACHABLE, UNREACHABLE
        unresolved, resolve = self.resolution(partial)
        extra = moved + resolve
        growth = self.target_size - L
        steps = (growth > 0) + (resolve > 0)
        least_h = bound(growth + L * extra, problem.n * growth + self._elements(L, extra), steps)
        return bound(L, self._elements(L, self.permute_floor), 1), least_h

    def h(self, state, phase: int) -> int:
        """The full heuristic of a node: max of the overlap and structural bounds, part by part. The
        overlap bound never exceeds ``T`` per device (``n T`` in all), so when the structural bound already
        does, its per-device computation is skipped."""
        problem = self.problem
        if not problem.informed:
            return 0
        busiest, total, steps = self.structural_pair(state, phase)
        if total >= UNREACHABLE:
            return UNREACHABLE
        if total >= problem.n * self.target_size and busiest >= self.target_size:
            return problem.pricing.bound(busiest, total, steps)
        over_busiest, over_total = self.overlap_pair(state)
        return problem.pricing.bound(max(busiest, over_busiest), max(total, over_total), steps)

