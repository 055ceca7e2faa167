"""The order part of the plan search's bounds: all-to-alls take a dim's minor suffix and append it at another
dim's minor end, so a dim's axes from its first wrongly placed one on must all leave it, and the target's axes
from there on must all enter it, unless a permute reorders them (`bounds.Bounds` combines the parts).
"""

from __future__ import annotations

from .problem import Problem


class DimOrder:
    """The order bound of one `Problem`, from per-dim facts cached per (dim, axes): states share most of their
    dims, so a new state costs a few lookups."""

    def __init__(self, problem: Problem, target_axes: set[str]):
        self.problem, self._target_axes = problem, target_axes
        self.per_dim: list[dict] = [{} for _ in problem.src[0]]  # per dim: axes -> facts

    def facts(self, d: int, axes: tuple) -> tuple[int, float, float, int]:
        """(group size, leaving fraction, entering fraction, first wrong position) of dim ``d`` holding
        ``axes`` -- the per-dim terms of the order bound (``leaving_entering``), cached per dim: states
        share most of their dims, so a new state costs a few lookups."""
        facts = self.per_dim[d].get(axes)
        if facts is None:
            g = self.problem.dst[0][d]
            group = self.problem.group
            j = 0
            while j < len(axes) and (axes[j] == g[j] if j < len(g) else axes[j] not in self._target_axes):
                j += 1
            facts = (group(axes), 1.0 - 1.0 / group(axes[j:]), 1.0 - 1.0 / group(g[j:]) if j < len(g) else 0.0, j)
            self.per_dim[d][axes] = facts
        return facts

    def leaving_entering(self, dims: tuple) -> tuple[float, float]:
        """The order bound, as fractions of ``n L``: (leaving, entering) all-to-all traffic if no permute
        is used.

        All-to-alls take a dim's minor suffix and append at another dim's minor end. A dim's axes from
        its first wrong position on (an axis other than the target's at that position, or, past the
        target's axes, an axis the target places elsewhere) must therefore all leave it -- together at
        least ``1 - 1/k`` of a block for a group of ``k`` devices -- and the target's axes from that
        position on must all enter it."""
        out = into = 0.0
        for d, axes in enumerate(dims):
            facts = self.facts(d, axes)
            out += facts[1]
            into += facts[2]
        return out, into

    def entering_after_slices(self, dims: tuple, addable: tuple) -> float:
        """The entering part of the order bound for a shrinking-phase node, whose slices may still append
        ``addable`` axes: a dim without a wrong position may yet be extended along the target by slices,
        as far as the target's next axes are addable; the rest must enter by all-to-alls. Each slice
        either keeps this or cuts such an extension short, so it never drops along a free slice."""
        value = 0.0
        target = self.problem.dst[0]
        for d, axes in enumerate(dims):
            facts = self.facts(d, axes)
            j = facts[3]
            if j < len(axes):
                value += facts[2]
                continue
            g = target[d]
            while j < len(g) and g[j] in addable:  # no wrong position: slices may extend it
                j += 1
            if j < len(g):
                value += 1.0 - 1.0 / self.problem.group(g[j:])
        return value
