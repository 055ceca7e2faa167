"""The products part of the plan search's bounds: what all-to-alls must still move to change the per-dim
group products of a state into those of a type that gathers into the target.

Only all-to-alls change the products (permutes and all-reduces keep them; slices and reduce-scatters grow
them); moving a factor ``k`` off or onto a dim costs at least ``n L (1 - 1/k)``. `GroupProducts` computes that
bound per products tuple and the block sizes a shrinking node can still reach, with their least cost, for
`bounds.Bounds` (see its module for how the parts combine).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from .problem import Problem

RELAX_ABOVE = 3  # shrinking nodes with more unused axes than this bound their extensions without listing them


class GroupProducts:
    """The products bound of one `Problem`, memoised per products tuple. ``info[dims].products`` gives the
    target's own group products (the search's per-dims table)."""

    def __init__(self, problem: Problem, info: Mapping, target_axes: set[str]):
        self.problem, self.info, self._target_axes = problem, info, target_axes
        self._cost: dict = {}  # products -> cost
        self._reachable: dict = {}  # (products, addable[, "relaxed"]) -> reachable_sizes(_relaxed)
        self._all_rows: tuple[list, np.ndarray] | None = None  # _all_target_rows
        self._by_total: dict = {}  # product of the groups -> target_rows

    @property
    def work(self) -> int:
        """Block sizes reachable by slicing (a unit each: with partial sums to resolve there can be a thousand
        of them for a few nodes) and products bounded (two units: a vector operation over the target rows)."""
        return len(self._reachable) + 2 * len(self._cost)

    def cost(self, p: tuple[int, ...]) -> float:
        """Lower bound, as a fraction of ``n L``, on the all-to-all traffic still needed by a constant-size
        (phase >= 1) node with per-dim group products ``p``; ``inf`` if no type that gathers into the
        target has the same block size.

        Only all-to-alls change the products; moving a factor ``k`` costs ``n L (1 - 1/k)``. The constant-size
        phase must end at products ``q`` of a type that gathers into the target (``q_d`` = the target's
        group of dim ``d`` times a product of axes the target leaves free). Dim ``d`` must send away a total
        factor that is a multiple of ``r = p_d / gcd(p_d, q_d)``; since ``1 - 1/k`` is subadditive over
        products, the all-to-alls leaving ``d`` cost at least ``n L (1 - 1/r)`` together, and as each
        all-to-all leaves one dim the sum over dims is a lower bound (likewise for the factors each dim
        must receive; the larger sum is taken). Permutes and all-reduces keep the products."""
        value = self._cost.get(p)
        if value is None:
            rows, q = self.target_rows(math.prod(p))
            if not rows:
                value = math.inf
            elif len(rows) <= 4:  # numpy's per-call overhead loses on a few rows
                value = math.inf
                for row in rows:
                    out = into = 0.0
                    for pd, qd in zip(p, row):
                        g = math.gcd(pd, qd)
                        out += 1.0 - g / pd
                        into += 1.0 - g / qd
                    value = min(value, max(out, into))
            else:
                pv = np.array(p, dtype=np.int64)
                g = np.gcd(pv, q)
                out = (1.0 - g / pv).sum(axis=1)  # 1 - 1/r with r = p/g
                into = (1.0 - g / q).sum(axis=1)
                value = float(np.maximum(out, into).min())
            self._cost[p] = value
        return value

    def target_rows(self, total: int) -> tuple[list, np.ndarray]:
        """Per-dim group products multiplying to ``total`` of the types that gather into the target (the
        target's groups times products of axes that neither its dims nor its partial sums use), as a
        list of tuples and as an array with one row each. All totals are enumerated once."""
        if not self._by_total:
            problem = self.problem
            vectors = {self.info[problem.dst[0]].products}
            for a in problem.axes:
                if a not in self._target_axes:
                    k = problem.sizes[a]
                    vectors |= {v[:d] + (v[d] * k,) + v[d + 1:] for v in vectors for d in range(len(v))}
            by_total: dict = {}
            for v in sorted(vectors):
                by_total.setdefault(math.prod(v), []).append(v)
            for t, rows in by_total.items():
                self._by_total[t] = (rows, np.array(rows, dtype=np.int64))
        return self._by_total.get(total, ([], None))

    def reachable_sizes(self, products: tuple, addable: tuple) -> tuple[tuple[int, float], ...]:
        """(block size, least ``cost``) for each block size reachable from ``products`` by
        appending some of ``addable`` to dims. The bound above is monotone in the cost, so the least cost
        per size is all it needs. Memoised recursion on the first addable axis (unused, or on one of the
        dims): shrinking nodes a slice apart share most of their subproblems."""
        if len(addable) > RELAX_ABOVE:
            return self._reachable_sizes_relaxed(products, addable)
        key = (products, addable)
        out = self._reachable.get(key)
        if out is None:
            if not addable:
                cost = self.cost(products)
                out = () if cost == math.inf else ((self.problem.elements // math.prod(products), cost),)
            else:
                k, rest = self.problem.sizes[addable[0]], addable[1:]
                least = dict(self.reachable_sizes(products, rest))
                for d in range(len(products)):
                    grown = products[:d] + (products[d] * k,) + products[d + 1:]
                    for size, cost in self.reachable_sizes(grown, rest):
                        if cost < least.get(size, math.inf):
                            least[size] = cost
                out = tuple(sorted(least.items()))
            self._reachable[key] = out
        return out

    def _reachable_sizes_relaxed(self, products: tuple, addable: tuple) -> tuple[tuple[int, float], ...]:
        """(block size, lower bound on ``cost``) for each block size reachable from
        ``products`` by appending some of ``addable`` to dims. Appending only grows a dim's group, so
        what a dim must send away towards a target row ``q`` never shrinks below its value now, and what
        it must receive is at least what it would with every addable axis appended to it. One
        vectorised pass over the target rows per node instead of enumerating every extension: used when
        there are many addable axes (hundreds of extensions), where it is the cheaper of the two."""
        key = (products, addable, "relaxed")
        out = self._reachable.get(key)
        if out is None:
            sizes, elements = self.problem.sizes, self.problem.elements
            rows, q = self._all_target_rows()
            p = np.array(products, dtype=np.int64)
            grown = p * math.prod(sizes[a] for a in addable)
            g = np.gcd(p, q)
            out_part = (1.0 - g / p).sum(axis=1)
            into_part = (1.0 - np.gcd(grown, q) / q).sum(axis=1)
            cost = np.maximum(out_part, into_part)
            totals = q.prod(axis=1)
            base = math.prod(products)
            reachable = {base}
            for a in addable:
                reachable |= {t * sizes[a] for t in reachable}
            least: dict = {}
            for total, c in zip(totals.tolist(), cost.tolist()):
                if total in reachable and total % base == 0 and c < least.get(total, math.inf):
                    least[total] = c
            out = self._reachable[key] = tuple(sorted((elements // t, c) for t, c in least.items()))
        return out

    def _all_target_rows(self) -> tuple[list, np.ndarray]:
        """All target product rows (every block size), as in ``target_rows``."""
        if self._all_rows is None:
            self.target_rows(1)
            rows = [r for t in sorted(self._by_total) for r in self._by_total[t][0]]
            self._all_rows = (rows, np.array(rows, dtype=np.int64).reshape(len(rows), len(self.problem.shape)))
        return self._all_rows
