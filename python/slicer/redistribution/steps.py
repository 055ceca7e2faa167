"""Collectives as typing rules, with their per-device costs.

Each step is an immutable value carrying exactly what the matching upstream ``shard`` collective needs
(``mesh_axes`` major to minor, the tensor dims, or for ``permute`` an explicit source->target device map)
plus ``type_after``. ``rule(before, mesh)`` derives the type after the step from the type before it (or
raises :class:`RedistributionError` when the step does not apply); ``received(before, layout)`` gives the
elements each device receives; live memory during a step is its input block plus its output block.

Rules (``K`` = product of the sizes of ``mesh_axes``, ``L`` = local element count before the step):

=================  =========================================================  =====================  =======
step               effect on the type                                          received per device    after
=================  =========================================================  =====================  =======
all_slice          append unused ``mesh_axes`` as the finest tiles of a dim     0                      L/K
all_gather         drop ``mesh_axes``, a minor suffix of a dim                  (K-1)L                 KL
all_to_all         move the minor suffix ``mesh_axes`` of ``concat_axis`` to    (K-1)L/K               L
                   the finest tiles of ``split_axis``
permute            any type with the same local shape (explicit device map)     L if moved, else 0     L
all_reduce         drop ``mesh_axes`` from the partial axes                     2(K-1)L/K (ring)       L
reduce_scatter     partial ``mesh_axes`` become the finest tiles of a dim       (K-1)L/K               L/K
=================  =========================================================  =====================  =======
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import ClassVar, Union

import numpy as np

from slicer.core.errors import RedistributionError
from .layout import Layout, nontrivial_partial
from slicer.core.mesh import Mesh
from . import subaxes
from .types import DistType


def _check_dim(t: DistType, dim: int, what: str) -> None:
    if not isinstance(dim, int) or not 0 <= dim < t.rank:
        raise RedistributionError(f"{what} {dim} is out of range for {t} of rank {t.rank}")


def _check_axes(mesh: Mesh, axes: tuple[str, ...], op: str) -> None:
    if not axes:
        raise RedistributionError(f"{op}: mesh_axes is empty; name at least one mesh axis")
    if len(set(axes)) != len(axes):
        raise RedistributionError(f"{op}: mesh_axes {list(axes)} repeats an axis")
    for a in axes:
        problem = subaxes.token_error(mesh, a)
        if problem:
            raise RedistributionError(f"{op}: {problem}; the mesh {mesh} has axes {', '.join(mesh.axis_names)}")
    problem = subaxes.overlap_error(mesh, [(a, "mesh_axes") for a in axes], f"[{','.join(axes)}]")
    if problem:
        raise RedistributionError(f"{op}: {problem}")


def _parts(mesh: Mesh, t: DistType, *groups: tuple[str, ...]) -> dict:
    """The common refinement of ``t``'s tokens and ``groups`` (see `subaxes.atoms`)."""
    texts = [a for d in t.dims for a in d] + list(t.partial) + [a for g in groups for a in g]
    return subaxes.atoms(mesh, texts)


def _suffix_cut(mesh: Mesh, t: DistType, dim: int, axes: tuple[str, ...], op: str) -> tuple[str, ...]:
    """The axes of dim ``dim`` that remain once its minor suffix ``axes`` is taken away (raises if ``axes``
    is not a minor suffix of the dim, part by part)."""
    row = t.dims[dim]
    if row[len(row) - len(axes):] == axes and len(axes) <= len(row):
        return row[:len(row) - len(axes)]
    parts = _parts(mesh, t, axes)
    have, take = subaxes.expand(parts, row), subaxes.expand(parts, axes)
    if len(take) > len(have) or have[len(have) - len(take):] != take:
        raise RedistributionError(
            f"{op}: mesh axes [{','.join(axes)}] are not the finest (last) tiles of dim {dim} in {t}; "
            f"only a minor suffix of [{','.join(row)}] can be gathered")
    return subaxes.canonical(mesh, have[:len(have) - len(take)])


def _check_unused(mesh: Mesh, t: DistType, axes: tuple[str, ...], op: str) -> None:
    used = t.used_axes()
    if not any(subaxes.is_sub_axis(a) for a in axes) and not t.has_sub_axes():
        for a in axes:
            if a in used:
                raise RedistributionError(f"{op}: mesh axis '{a}' is already used in {t}; slice only by unused axes")
        return
    places = [(a, "the type") for a in used] + [(a, op) for a in axes]
    if subaxes.overlap_error(mesh, places, str(t)):
        raise RedistributionError(f"{op}: mesh axes [{','.join(axes)}] overlap the axes used in {t}; slice only "
                                  "by unused axes (or unused parts of axes)")


def _check_divisible(mesh: Mesh, t: DistType, dim: int, axes: tuple[str, ...], op: str) -> None:
    local = t.local_shape(mesh)[dim]
    k = subaxes.group_size(mesh, axes)
    if local % k:
        raise RedistributionError(
            f"{op}: local size {local} of dim {dim} in {t} is not divisible by {k} = |{','.join(axes)}|")


def _appended(mesh: Mesh, row: tuple[str, ...], axes: tuple[str, ...]) -> tuple[str, ...]:
    return subaxes.canonical(mesh, row + axes)


def _without_partial(mesh: Mesh, t: DistType, axes: tuple[str, ...], op: str) -> tuple[str, ...]:
    """``t``'s partial axes once ``axes`` are resolved (raises if one of ``axes`` is not partial)."""
    if all(a in t.partial for a in axes):
        return tuple(a for a in t.partial if a not in axes)
    parts = _parts(mesh, t, axes)
    have = subaxes.expand(parts, t.partial)
    for a in subaxes.expand(parts, axes):
        if a not in have:
            raise RedistributionError(f"{op}: mesh axis '{a}' is not a partial-sum axis of {t}")
    drop = set(subaxes.expand(parts, axes))
    return subaxes.canonical_set(mesh, [a for a in have if a not in drop])


def _replace_dim(dims, dim, axes):
    return tuple(axes if i == dim else d for i, d in enumerate(dims))


@dataclass(frozen=True)
class AllSlice:
    """Local dynamic slice: each device keeps the chunk of ``slice_axis`` at its index in ``mesh_axes``."""
    slice_axis: int
    mesh_axes: tuple[str, ...]
    type_after: DistType
    op: ClassVar[str] = "all_slice"

    def rule(self, before: DistType, mesh: Mesh) -> DistType:
        _check_dim(before, self.slice_axis, "all_slice: slice_axis")
        _check_axes(mesh, self.mesh_axes, self.op)
        _check_unused(mesh, before, self.mesh_axes, self.op)
        _check_divisible(mesh, before, self.slice_axis, self.mesh_axes, self.op)
        dims = _replace_dim(before.dims, self.slice_axis, _appended(mesh, before.dims[self.slice_axis], self.mesh_axes))
        return DistType(before.shape, dims, before.partial)

    def received(self, before: DistType, layout: Layout) -> np.ndarray:
        return np.zeros(layout.device_count, dtype=np.int64)

    def fields(self) -> dict:
        return {"slice_axis": self.slice_axis, "mesh_axes": list(self.mesh_axes)}


@dataclass(frozen=True)
class AllGather:
    """Concatenate the blocks of the group over ``mesh_axes`` along ``gather_axis`` (group order)."""
    gather_axis: int
    mesh_axes: tuple[str, ...]
    type_after: DistType
    op: ClassVar[str] = "all_gather"

    def rule(self, before: DistType, mesh: Mesh) -> DistType:
        _check_dim(before, self.gather_axis, "all_gather: gather_axis")
        _check_axes(mesh, self.mesh_axes, self.op)
        kept = _suffix_cut(mesh, before, self.gather_axis, self.mesh_axes, self.op)
        return DistType(before.shape, _replace_dim(before.dims, self.gather_axis, kept), before.partial)

    def received(self, before: DistType, layout: Layout) -> np.ndarray:
        k = subaxes.group_size(layout.mesh, self.mesh_axes)
        return np.full(layout.device_count, (k - 1) * before.local_size(layout.mesh), dtype=np.int64)

    def fields(self) -> dict:
        return {"gather_axis": self.gather_axis, "mesh_axes": list(self.mesh_axes)}


@dataclass(frozen=True)
class AllToAll:
    """Split ``split_axis`` into K chunks, send chunk j to group member j, concatenate along ``concat_axis``.

    Members are numbered over ``mesh_axes`` (major to minor), the minor suffix of ``concat_axis`` that the
    step takes away. With ``split_mesh_axes`` (the same axes in another order) chunk j goes instead to the
    member whose index over ``split_mesh_axes`` is j, so ``split_axis`` gains the axes in that order: a
    *reordering* all-to-all, which saves the permute that would otherwise put them in order (same cost)."""
    split_axis: int
    concat_axis: int
    mesh_axes: tuple[str, ...]
    type_after: DistType
    split_mesh_axes: tuple[str, ...] | None = None
    op: ClassVar[str] = "all_to_all"

    @property
    def split_order(self) -> tuple[str, ...]:
        """The order in which ``split_axis`` gains the axes (``mesh_axes`` unless reordering)."""
        return self.mesh_axes if self.split_mesh_axes is None else self.split_mesh_axes

    def rule(self, before: DistType, mesh: Mesh) -> DistType:
        _check_dim(before, self.split_axis, "all_to_all: split_axis")
        _check_dim(before, self.concat_axis, "all_to_all: concat_axis")
        if self.split_axis == self.concat_axis:
            raise RedistributionError("all_to_all: split_axis and concat_axis must differ")
        _check_axes(mesh, self.mesh_axes, self.op)
        order = self.split_order
        if order != self.mesh_axes:
            _check_axes(mesh, order, self.op)
            parts = _parts(mesh, before, self.mesh_axes, order)
            if sorted(subaxes.expand(parts, order)) != sorted(subaxes.expand(parts, self.mesh_axes)):
                raise RedistributionError(f"all_to_all: split_mesh_axes [{','.join(order)}] are not the mesh_axes "
                                          f"[{','.join(self.mesh_axes)}] in another order")
        kept = _suffix_cut(mesh, before, self.concat_axis, self.mesh_axes, self.op)
        _check_divisible(mesh, before, self.split_axis, self.mesh_axes, self.op)
        dims = _replace_dim(before.dims, self.concat_axis, kept)
        dims = _replace_dim(dims, self.split_axis, _appended(mesh, dims[self.split_axis], order))
        return DistType(before.shape, dims, before.partial)

    def received(self, before: DistType, layout: Layout) -> np.ndarray:
        k = subaxes.group_size(layout.mesh, self.mesh_axes)
        return np.full(layout.device_count, (k - 1) * (before.local_size(layout.mesh) // k), dtype=np.int64)

    def fields(self) -> dict:
        out = {"split_axis": self.split_axis, "concat_axis": self.concat_axis, "mesh_axes": list(self.mesh_axes)}
        if self.split_mesh_axes is not None and self.split_mesh_axes != self.mesh_axes:
            out["split_mesh_axes"] = list(self.split_mesh_axes)
        return out


@dataclass(frozen=True)
class Permute:
    """Device ``dst`` receives the whole block of device ``src`` for every ``(src, dst)`` in ``pairs``
    (linear ranks); other devices keep their block. Retypes to any type with the same local shape.

    ``pairs`` is the public form (what the ``shard``/``slicer.permute`` op and the JSON carry). Meshes reach
    thousands of devices, so the checks work on ``pair_array`` (one row per pair), built once per step:
    directly from the planner's arrays by :meth:`between`, else lazily from ``pairs``."""
    pairs: tuple[tuple[int, int], ...]
    type_after: DistType
    op: ClassVar[str] = "permute"

    @classmethod
    def between(cls, senders: np.ndarray, receivers: np.ndarray, type_after: DistType) -> "Permute":
        """The permute in which ``senders[i]`` sends its block to ``receivers[i]``."""
        pairs = np.stack([senders, receivers], axis=1).astype(np.int64, copy=False)
        return cls._with_pair_array(tuple(zip(senders.tolist(), receivers.tolist())), type_after, pairs)

    @classmethod
    def _with_pair_array(cls, pairs: tuple, type_after: DistType, pair_array: np.ndarray) -> "Permute":
        """A permute whose ``pair_array`` is already known (fills the cached property's slot)."""
        step = cls(pairs, type_after)
        step.__dict__["pair_array"] = pair_array
        return step

    @cached_property
    def pair_array(self) -> np.ndarray:
        """``pairs`` as an ``(m, 2)`` integer array (sender, receiver)."""
        return np.array(self.pairs, dtype=np.int64).reshape(-1, 2)

    def retyped(self, type_after: DistType) -> "Permute":
        """The same device map with another ``type_after`` (keeps the array form)."""
        return self._with_pair_array(self.pairs, type_after, self.pair_array)

    def source_of(self, n: int) -> np.ndarray:
        """Per device: the device whose block it holds after the step."""
        src = np.arange(n, dtype=np.int64)
        pairs = self.pair_array
        src[pairs[:, 1]] = pairs[:, 0]
        return src

    def rule(self, before: DistType, mesh: Mesh, layout: Layout | None = None) -> DistType:
        after = self.type_after
        if after.shape != before.shape or len(after.dims) != len(before.dims):
            raise RedistributionError(f"permute: {after} does not have the global shape of {before}")
        if after.local_shape(mesh) != before.local_shape(mesh):
            raise RedistributionError(
                f"permute: local shape {after.local_shape(mesh)} of {after} differs from {before.local_shape(mesh)} "
                f"of {before}; permute only relabels blocks of equal shape")
        if nontrivial_partial(mesh, before) != nontrivial_partial(mesh, after):
            raise RedistributionError(f"permute: {before} and {after} have different partial-sum axes")
        DistType.of(mesh, after.shape, after.dims, after.partial)
        n = mesh.device_count
        pairs = self.pair_array
        if pairs.size and (pairs.min() < 0 or pairs.max() >= n):
            raise RedistributionError(f"permute: a rank in {list(self.pairs)} is outside the mesh of {n} devices")
        senders, receivers = np.sort(pairs[:, 0]), np.sort(pairs[:, 1])
        if (pairs[:, 0] == pairs[:, 1]).any() or (receivers[1:] == receivers[:-1]).any() \
                or not np.array_equal(senders, receivers):
            raise RedistributionError("permute: pairs must form a permutation of the moved devices (each moved "
                                      "device sends once and receives once, no self pairs)")
        layout = layout or Layout(mesh, before.shape)
        source = self.source_of(n)
        wrong = np.nonzero(layout.block_ids(before)[source] != layout.block_ids(after))[0]
        if wrong.size:
            r = int(wrong[0])
            raise RedistributionError(
                f"permute: device {r} {mesh.coords(r)} would receive the block of device {int(source[r])}, "
                f"which is not its block under {after}")
        return after

    def received(self, before: DistType, layout: Layout) -> np.ndarray:
        out = np.zeros(layout.device_count, dtype=np.int64)
        out[self.pair_array[:, 1]] = before.local_size(layout.mesh)
        return out

    def fields(self) -> dict:
        return {"pairs": [list(p) for p in self.pairs]}


@dataclass(frozen=True)
class AllReduce:
    """Sum over the group over the partial axes ``mesh_axes``; they stop being partial."""
    mesh_axes: tuple[str, ...]
    type_after: DistType
    op: ClassVar[str] = "all_reduce"

    def rule(self, before: DistType, mesh: Mesh) -> DistType:
        _check_axes(mesh, self.mesh_axes, self.op)
        return DistType(before.shape, before.dims, _without_partial(mesh, before, self.mesh_axes, self.op))

    def received(self, before: DistType, layout: Layout) -> np.ndarray:
        k = subaxes.group_size(layout.mesh, self.mesh_axes)
        local = before.local_size(layout.mesh)
        return np.full(layout.device_count, -(-2 * (k - 1) * local // k), dtype=np.int64)

    def fields(self) -> dict:
        return {"mesh_axes": list(self.mesh_axes)}


@dataclass(frozen=True)
class ReduceScatter:
    """Sum over the partial axes ``mesh_axes`` and keep the chunk of ``scatter_axis`` at the group index."""
    scatter_axis: int
    mesh_axes: tuple[str, ...]
    type_after: DistType
    op: ClassVar[str] = "reduce_scatter"

    def rule(self, before: DistType, mesh: Mesh) -> DistType:
        _check_dim(before, self.scatter_axis, "reduce_scatter: scatter_axis")
        _check_axes(mesh, self.mesh_axes, self.op)
        partial = _without_partial(mesh, before, self.mesh_axes, self.op)
        _check_divisible(mesh, before, self.scatter_axis, self.mesh_axes, self.op)
        dims = _replace_dim(before.dims, self.scatter_axis, _appended(mesh, before.dims[self.scatter_axis], self.mesh_axes))
        return DistType(before.shape, dims, partial)

    def received(self, before: DistType, layout: Layout) -> np.ndarray:
        k = subaxes.group_size(layout.mesh, self.mesh_axes)
        return np.full(layout.device_count, (k - 1) * (before.local_size(layout.mesh) // k), dtype=np.int64)

    def fields(self) -> dict:
        return {"scatter_axis": self.scatter_axis, "mesh_axes": list(self.mesh_axes)}


Step = Union[AllSlice, AllGather, AllToAll, Permute, AllReduce, ReduceScatter]
STEP_TYPES = {cls.op: cls for cls in (AllSlice, AllGather, AllToAll, Permute, AllReduce, ReduceScatter)}


def apply_rule(step: Step, before: DistType, mesh: Mesh, layout: Layout | None = None) -> DistType:
    """The type after ``step`` from the type before it (raises if the step does not type-check)."""
    if isinstance(step, Permute):
        return step.rule(before, mesh, layout)
    return step.rule(before, mesh)


def step_with_type(step: Step, type_after: DistType) -> Step:
    """The same step with another ``type_after`` (used when re-deriving types)."""
    if step.type_after == type_after:
        return step
    if isinstance(step, Permute):
        return step.retyped(type_after)
    return replace(step, type_after=type_after)
