"""The moves of the plan search (`search`): one named type per collective, on *reduced* types.

A move says what the search decided on reduced types (mesh axes of size 1 dropped): the dims and the
axes group. ``step(current)`` turns it into the collective (`steps`) on the real type ``current``, size-1
axes included; a permute move names its target state instead, which `synthesis` turns into the pairs of a
`steps.Permute` (merging consecutive ones). Moves are named tuples: the search builds millions of them,
and a named tuple costs little more than a plain one.
"""

from __future__ import annotations

from typing import NamedTuple

from .steps import AllGather, AllReduce, AllSlice, AllToAll, ReduceScatter
from .types import DistType


def _suffix_from(dims: tuple[str, ...], first: str) -> tuple[str, ...]:
    """The minor suffix of ``dims`` from ``first`` on (with the size-1 axes the reduced type left out)."""
    return dims[dims.index(first):]


class SliceMove(NamedTuple):
    """Slice ``dim`` by the unused ``axes`` (becomes an `AllSlice`)."""
    dim: int
    axes: tuple[str, ...]

    def step(self, current: DistType) -> AllSlice:
        return AllSlice(self.dim, self.axes, current)


class ReduceScatterMove(NamedTuple):
    """Resolve the partial ``axes`` onto ``dim`` (becomes a `ReduceScatter`)."""
    dim: int
    axes: tuple[str, ...]

    def step(self, current: DistType) -> ReduceScatter:
        return ReduceScatter(self.dim, self.axes, current)


class AllReduceMove(NamedTuple):
    """Resolve the partial ``axes`` (becomes an `AllReduce`)."""
    axes: tuple[str, ...]

    def step(self, current: DistType) -> AllReduce:
        return AllReduce(self.axes, current)


class AllToAllMove(NamedTuple):
    """Move the minor suffix ``axes`` of ``concat_dim`` onto the minor end of ``split_dim``, in ``order``
    when given (a reordering all-to-all), else in their own order (becomes an `AllToAll`)."""
    split_dim: int
    concat_dim: int
    axes: tuple[str, ...]
    order: tuple[str, ...] | None = None

    def step(self, current: DistType) -> AllToAll:
        suffix = _suffix_from(current.dims[self.concat_dim], self.axes[0])
        order = None
        if self.order is not None:  # the moved axes in this order, then any size-1 axes among them
            order = self.order + tuple(a for a in suffix if a not in self.axes)
        return AllToAll(self.split_dim, self.concat_dim, suffix, current, None if order == suffix else order)


class GatherMove(NamedTuple):
    """Gather the minor suffix ``axes`` of ``dim`` (becomes an `AllGather`)."""
    dim: int
    axes: tuple[str, ...]

    def step(self, current: DistType) -> AllGather:
        return AllGather(self.dim, _suffix_from(current.dims[self.dim], self.axes[0]), current)


class PermuteMove(NamedTuple):
    """Relabel blocks to the reduced state ``target`` = (dims, partial) of the same local shape."""
    target: tuple


class SwitchMove(NamedTuple):
    """Free, stepless move from a shrinking node to its constant-size twin (no collective)."""


SWITCH = SwitchMove()
