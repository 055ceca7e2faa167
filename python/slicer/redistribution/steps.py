"""Collectives: one class per collective, the one owner of everything about it.

Each step is an immutable value carrying exactly what the matching upstream ``shard`` collective needs
(``mesh_axes`` major to minor, the tensor dims, or for ``permute`` an explicit source->target device map)
plus ``type_after``. Its class carries its typing rule both ways, its cost, its numpy semantics, its text form
and its IR form (the full list: docs/module-notes.md, `redistribution/steps.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import ClassVar

import numpy as np

from slicer.core import dtypes
from slicer.core.errors import RedistributionError
from slicer.core.mesh import Mesh
from slicer.core.names import (
    ALL_GATHER,
    ALL_REDUCE,
    ALL_SLICE,
    ALL_TO_ALL,
    CONCAT_AXIS_ATTR,
    GATHER_AXIS_ATTR,
    GRID_AXES_ATTR,
    PAIRS_ATTR,
    PERMUTE,
    REDUCE_SCATTER,
    REDUCTION_ATTR,
    REORDERING_ALL_TO_ALL,
    SCATTER_AXIS_ATTR,
    SLICE_AXIS_ATTR,
    SPLIT_AXIS_ATTR,
    SPLIT_GRID_AXES_ATTR,
)

from . import step_rules as rules
from . import subaxes
from .collective import (  # noqa: F401
    STEP_OF_IR,
    STEP_TYPES,
    Collective,
    apply_rule,
    register,
    step_from_fields,
    step_with_type,
    type_before,
)
from .layout import Layout, nontrivial_partial
from .types import DistType


@register
@dataclass(frozen=True)
class AllSlice(Collective):
    """Local dynamic slice: each device keeps the chunk of ``slice_dim`` at its index in ``mesh_axes``."""
    slice_dim: int
    mesh_axes: tuple[str, ...]
    type_after: DistType
    op: ClassVar[str] = "all_slice"
    phase: ClassVar[int | None] = 0
    ir_name: ClassVar[str] = ALL_SLICE
    ir_dim_keys: ClassVar[dict[str, str]] = {"slice_dim": SLICE_AXIS_ATTR}
    local: ClassVar[bool] = True

    def rule(self, before: DistType, mesh: Mesh, layout: Layout | None = None) -> DistType:
        rules.check_dim(before, self.slice_dim, "all_slice: slice_dim")
        rules.check_axes(mesh, self.mesh_axes, self.op)
        rules.check_unused(mesh, before, self.mesh_axes, self.op)
        rules.check_divisible(mesh, before, self.slice_dim, self.mesh_axes, self.op)
        dims = rules.replace_dim(before.dims, self.slice_dim,
                                 rules.appended(mesh, before.dims[self.slice_dim], self.mesh_axes))
        return DistType(before.shape, dims, before.partial)

    def inverse(self, dims: list, partial: list) -> bool:
        return rules.drop_suffix(dims, self.slice_dim, self.mesh_axes)

    def numpy_group(self, layout: Layout, row, blocks: list) -> list:
        k = len(row)
        return [np.ascontiguousarray(np.split(b, k, axis=self.slice_dim)[j]) for j, b in enumerate(blocks)]

    @staticmethod
    def busiest(k: int, local: int) -> int:
        return 0

    def link_axes(self, mesh: Mesh) -> tuple[str, ...]:
        return ()  # local: no communication

    def merged(self, after: AllSlice, mesh: Mesh) -> AllSlice | None:
        if after.slice_dim != self.slice_dim:
            return None
        return AllSlice(self.slice_dim, self.mesh_axes + after.mesh_axes, after.type_after)


@register
@dataclass(frozen=True)
class AllGather(Collective):
    """Concatenate the blocks of the group over ``mesh_axes`` along ``gather_dim`` (group order)."""
    gather_dim: int
    mesh_axes: tuple[str, ...]
    type_after: DistType
    op: ClassVar[str] = "all_gather"
    phase: ClassVar[int | None] = 2
    ir_name: ClassVar[str] = ALL_GATHER
    ir_dim_keys: ClassVar[dict[str, str]] = {"gather_dim": GATHER_AXIS_ATTR}

    def rule(self, before: DistType, mesh: Mesh, layout: Layout | None = None) -> DistType:
        rules.check_dim(before, self.gather_dim, "all_gather: gather_dim")
        rules.check_axes(mesh, self.mesh_axes, self.op)
        kept = rules.suffix_cut(mesh, before, self.gather_dim, self.mesh_axes, self.op)
        return DistType(before.shape, rules.replace_dim(before.dims, self.gather_dim, kept), before.partial)

    def inverse(self, dims: list, partial: list) -> bool:
        dims[self.gather_dim] += self.mesh_axes
        return True

    def numpy_group(self, layout: Layout, row, blocks: list) -> list:
        whole = np.concatenate(blocks, axis=self.gather_dim)
        return [whole] * len(row)

    @staticmethod
    def busiest(k: int, local: int) -> int:
        return (k - 1) * local

    def merged(self, after: AllGather, mesh: Mesh) -> AllGather | None:
        if after.gather_dim != self.gather_dim:
            return None  # the later gather's axes are the coarser tiles
        return AllGather(self.gather_dim, after.mesh_axes + self.mesh_axes, after.type_after)


@register
@dataclass(frozen=True)
class AllToAll(Collective):
    """Split ``split_dim`` into K chunks, send chunk j to group member j, concatenate along ``concat_dim``.

    Members are numbered over ``mesh_axes`` (major to minor), the minor suffix of ``concat_dim`` that the
    step takes away. With ``split_mesh_axes`` (the same axes in another order) chunk j goes instead to the
    member whose index over ``split_mesh_axes`` is j, so ``split_dim`` gains the axes in that order: a
    *reordering* all-to-all, which saves the permute that would otherwise put them in order (same cost).
    It is emitted as `slicer.all_to_all` (``shard.all_to_all`` numbers both sides the same way)."""
    split_dim: int
    concat_dim: int
    mesh_axes: tuple[str, ...]
    type_after: DistType
    split_mesh_axes: tuple[str, ...] | None = None
    op: ClassVar[str] = "all_to_all"
    phase: ClassVar[int | None] = 1
    ir_name: ClassVar[str] = ALL_TO_ALL
    ir_dim_keys: ClassVar[dict[str, str]] = {"split_dim": SPLIT_AXIS_ATTR, "concat_dim": CONCAT_AXIS_ATTR}
    ir_aliases: ClassVar[tuple[str, ...]] = (REORDERING_ALL_TO_ALL,)

    @property
    def split_order(self) -> tuple[str, ...]:
        """The order in which ``split_dim`` gains the axes (``mesh_axes`` unless reordering)."""
        return self.mesh_axes if self.split_mesh_axes is None else self.split_mesh_axes

    @property
    def reordering(self) -> bool:
        return self.split_order != self.mesh_axes

    def named_axes(self) -> set[str]:
        return set(self.mesh_axes) | set(self.split_order)

    def lifted(self, refinement: subaxes.Refinement, type_after: DistType) -> AllToAll:
        order = None if self.split_mesh_axes is None else refinement.up_axes(self.split_mesh_axes)
        return replace(self, mesh_axes=refinement.up_axes(self.mesh_axes), split_mesh_axes=order,
                       type_after=type_after)

    def rule(self, before: DistType, mesh: Mesh, layout: Layout | None = None) -> DistType:
        rules.check_dim(before, self.split_dim, "all_to_all: split_dim")
        rules.check_dim(before, self.concat_dim, "all_to_all: concat_dim")
        if self.split_dim == self.concat_dim:
            raise RedistributionError("all_to_all: split_dim and concat_dim must differ")
        rules.check_axes(mesh, self.mesh_axes, self.op)
        order = self.split_order
        if order != self.mesh_axes:
            rules.check_axes(mesh, order, self.op)
            parts = rules.common_parts(mesh, before, self.mesh_axes, order)
            if sorted(subaxes.expand(parts, order)) != sorted(subaxes.expand(parts, self.mesh_axes)):
                raise RedistributionError(f"all_to_all: split_mesh_axes [{','.join(order)}] are not the mesh_axes "
                                          f"[{','.join(self.mesh_axes)}] in another order")
        kept = rules.suffix_cut(mesh, before, self.concat_dim, self.mesh_axes, self.op)
        rules.check_divisible(mesh, before, self.split_dim, self.mesh_axes, self.op)
        dims = rules.replace_dim(before.dims, self.concat_dim, kept)
        dims = rules.replace_dim(dims, self.split_dim, rules.appended(mesh, dims[self.split_dim], order))
        return DistType(before.shape, dims, before.partial)

    def inverse(self, dims: list, partial: list) -> bool:
        if not rules.drop_suffix(dims, self.split_dim, self.split_order):
            return False
        dims[self.concat_dim] += self.mesh_axes
        return True

    def numpy_group(self, layout: Layout, row, blocks: list) -> list:
        # chunk j of every member goes to the member whose index over the split order is j
        chunk = layout.group_index(self.split_order)[row]
        pieces = [np.split(b, len(row), axis=self.split_dim) for b in blocks]
        return [np.concatenate([p[chunk[j]] for p in pieces], axis=self.concat_dim) for j in range(len(row))]

    @staticmethod
    def busiest(k: int, local: int) -> int:
        return (k - 1) * (local // k)

    def fields(self) -> dict:
        out = {"split_dim": self.split_dim, "concat_dim": self.concat_dim, "mesh_axes": list(self.mesh_axes)}
        if self.split_mesh_axes is not None and self.split_mesh_axes != self.mesh_axes:
            out["split_mesh_axes"] = list(self.split_mesh_axes)
        return out

    def ir_op_name(self) -> str:
        return REORDERING_ALL_TO_ALL if self.reordering else ALL_TO_ALL

    def ir_groups(self) -> dict[str, tuple[str, ...]]:
        out = {GRID_AXES_ATTR: tuple(self.mesh_axes)}
        if self.reordering:
            out[SPLIT_GRID_AXES_ATTR] = tuple(self.split_order)
        return out

    @classmethod
    def from_ir(cls, name: str, read, type_after: DistType) -> AllToAll:
        order = read.group(SPLIT_GRID_AXES_ATTR) or None  # present on the reordering op only
        return cls(read.dim(SPLIT_AXIS_ATTR), read.dim(CONCAT_AXIS_ATTR), read.group(GRID_AXES_ATTR), type_after,
                   order)


@register
@dataclass(frozen=True)
class Permute(Collective):
    """Device ``dst`` receives the whole block of device ``src`` for every ``(src, dst)`` in ``pairs``
    (linear ranks); other devices keep their block. Retypes to any type with the same local shape.

    ``pairs`` is the public form (what the ``shard``/``slicer.permute`` op and the JSON carry). Meshes reach
    thousands of devices, so the checks work on ``pair_array`` (one row per pair), built once per step:
    directly from the planner's arrays by :meth:`between`, else lazily from ``pairs``."""
    pairs: tuple[tuple[int, int], ...]
    type_after: DistType
    op: ClassVar[str] = "permute"
    phase: ClassVar[int | None] = 1
    ir_name: ClassVar[str] = PERMUTE
    relabels: ClassVar[bool] = True
    point_to_point: ClassVar[bool] = True

    @classmethod
    def between(cls, senders: np.ndarray, receivers: np.ndarray, type_after: DistType) -> Permute:
        """The permute in which ``senders[i]`` sends its block to ``receivers[i]``."""
        pairs = np.stack([senders, receivers], axis=1).astype(np.int64, copy=False)
        return cls._with_pair_array(tuple(zip(senders.tolist(), receivers.tolist())), type_after, pairs)

    @classmethod
    def _with_pair_array(cls, pairs: tuple, type_after: DistType, pair_array: np.ndarray) -> Permute:
        """A permute whose ``pair_array`` is already known (fills the cached property's slot)."""
        step = cls(pairs, type_after)
        step.__dict__["pair_array"] = pair_array
        return step

    @cached_property
    def pair_array(self) -> np.ndarray:
        """``pairs`` as an ``(m, 2)`` integer array (sender, receiver)."""
        return np.array(self.pairs, dtype=np.int64).reshape(-1, 2)

    def retyped(self, type_after: DistType) -> Permute:
        """The same device map with another ``type_after`` (keeps the array form)."""
        return self._with_pair_array(self.pairs, type_after, self.pair_array)

    def lifted(self, refinement: subaxes.Refinement, type_after: DistType) -> Permute:
        return self.retyped(type_after)  # a refined mesh has the same linear ranks

    def on_mesh(self, mesh: Mesh, sub: Mesh) -> Permute:
        return Permute(_lift_pairs(mesh, sub, self.pair_array), self.type_after)

    def named_axes(self) -> set[str]:
        return set()

    def moves_nothing(self) -> bool:
        return not self.pairs  # a pure relabelling of size-1 axes

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

    def inverse(self, dims: list, partial: list) -> bool:
        return False  # the type before is any type with the same local shape

    def numpy_blocks(self, layout: Layout, blocks) -> list[np.ndarray]:
        source = self.source_of(layout.device_count)
        return [blocks[int(source[r])] for r in range(layout.device_count)]

    @staticmethod
    def busiest(k: int, local: int) -> int:
        return local  # a moved device receives a whole block

    def received(self, before: DistType, layout: Layout) -> np.ndarray:
        out = np.zeros(layout.device_count, dtype=np.int64)
        out[self.pair_array[:, 1]] = self.busiest(2, before.local_size(layout.mesh))
        return out

    def link_axes(self, mesh: Mesh) -> tuple[str, ...]:
        """The axes along which some sender and its receiver differ."""
        pairs = self.pair_array
        if not len(pairs):
            return ()
        coords = np.array(np.unravel_index(np.arange(mesh.device_count), mesh.shape)).T
        differ = (coords[pairs[:, 0]] != coords[pairs[:, 1]]).any(axis=0)
        return tuple(a for a, moved in zip(mesh.axis_names, differ) if moved)

    def fields(self) -> dict:
        return {PAIRS_ATTR: [list(p) for p in self.pairs]}  # its text form keys it as its IR attribute

    def ir_dims(self) -> dict[str, int]:
        return {}

    def ir_groups(self) -> dict[str, tuple[str, ...]]:
        return {}  # its device map is the `pairs` attribute (slicer.dialect.collectives)

    def ir_ints(self) -> dict[str, list[int]]:
        return {PAIRS_ATTR: [int(v) for pair in self.pairs for v in pair]}

    @classmethod
    def from_ir(cls, name: str, read, type_after: DistType) -> Permute:
        flat = read.ints(PAIRS_ATTR)
        return cls(tuple((flat[i], flat[i + 1]) for i in range(0, len(flat), 2)), type_after)


def _lift_pairs(mesh: Mesh, sub: Mesh, pairs: np.ndarray) -> tuple[tuple[int, int], ...]:
    """Sub-mesh ``(sender, receiver)`` ranks -> the same exchange within every group of equal coordinates
    on the axes of ``mesh`` that ``sub`` lacks (full-mesh linear ranks, row-major)."""
    if not len(pairs):
        return ()
    coords = np.array(np.unravel_index(np.arange(mesh.device_count), mesh.shape)).T  # rank -> coordinate
    sub_axes = [mesh.axis_index(name) for name in sub.axis_names]
    sub_rank = np.asarray(np.ravel_multi_index(coords[:, sub_axes].T, sub.shape))  # (an array: the stubs say intp)
    receiver_of = np.full(sub.device_count, -1, dtype=np.int64)
    receiver_of[pairs[:, 0]] = pairs[:, 1]
    moving = receiver_of[sub_rank] >= 0
    senders = np.nonzero(moving)[0]
    target = coords[senders].copy()
    target[:, sub_axes] = np.array(np.unravel_index(receiver_of[sub_rank[senders]], sub.shape)).T
    receivers = np.asarray(np.ravel_multi_index(target.T, mesh.shape))
    return tuple(zip(senders.tolist(), receivers.tolist()))


#: The reductions an all_reduce may combine blocks with (its IR attribute `#shard<partial ...>`): a sum, the
#: reduction of every partial type, or a maximum, which the partitioner emits itself for a max over a tiled
#: dim (log-softmax's, `spmd.partitioner`); plans never choose one.
REDUCTIONS = {"sum": np.add, "max": np.maximum}


@register
@dataclass(frozen=True)
class AllReduce(Collective):
    """Sum (or, with ``reduction="max"``, maximum) over the group over the partial axes ``mesh_axes``; they
    stop being partial."""
    mesh_axes: tuple[str, ...]
    type_after: DistType
    reduction: str = "sum"
    op: ClassVar[str] = "all_reduce"
    phase: ClassVar[int | None] = None
    ir_name: ClassVar[str] = ALL_REDUCE
    reduces: ClassVar[bool] = True

    def __post_init__(self):
        if self.reduction not in REDUCTIONS:
            raise RedistributionError(f"all_reduce: unknown reduction '{self.reduction}'; one of "
                                      f"{', '.join(REDUCTIONS)}")

    def fields(self) -> dict:
        out = super().fields()
        if self.reduction != "sum":
            out["reduction"] = self.reduction
        return out

    def rule(self, before: DistType, mesh: Mesh, layout: Layout | None = None) -> DistType:
        rules.check_axes(mesh, self.mesh_axes, self.op)
        return DistType(before.shape, before.dims, rules.without_partial(mesh, before, self.mesh_axes, self.op))

    def inverse(self, dims: list, partial: list) -> bool:
        partial += self.mesh_axes
        return True

    def lifted(self, refinement: subaxes.Refinement, type_after: DistType) -> AllReduce:
        axes = subaxes.canonical_set(refinement.mesh, refinement.up_axes(self.mesh_axes, merge=False))
        return replace(self, mesh_axes=axes, type_after=type_after)

    def merged(self, after: AllReduce, mesh: Mesh) -> AllReduce | None:
        if after.reduction != self.reduction:
            return None
        axes = tuple(sorted(set(self.mesh_axes) | set(after.mesh_axes), key=mesh.axis_index))
        return AllReduce(axes, after.type_after, self.reduction)

    def ir_reductions(self) -> dict[str, str]:
        return {} if self.reduction == "sum" else {REDUCTION_ATTR: self.reduction}

    @classmethod
    def from_ir(cls, name: str, read, type_after: DistType) -> AllReduce:
        return cls(read.group(GRID_AXES_ATTR), type_after, read.reduction(REDUCTION_ATTR))

    def numpy_group(self, layout: Layout, row, blocks: list) -> list:
        if self.reduction == "max":
            return [np.max(blocks, axis=0)] * len(row)
        total = dtypes.sum_blocks(blocks)
        return [total] * len(row)

    @staticmethod
    def busiest(k: int, local: int) -> int:
        return -(-2 * (k - 1) * local // k)  # ring


@register
@dataclass(frozen=True)
class ReduceScatter(Collective):
    """Sum over the partial axes ``mesh_axes`` and keep the chunk of ``scatter_dim`` at the group index."""
    scatter_dim: int
    mesh_axes: tuple[str, ...]
    type_after: DistType
    op: ClassVar[str] = "reduce_scatter"
    phase: ClassVar[int | None] = 0
    ir_name: ClassVar[str] = REDUCE_SCATTER
    ir_dim_keys: ClassVar[dict[str, str]] = {"scatter_dim": SCATTER_AXIS_ATTR}
    reduces: ClassVar[bool] = True

    def rule(self, before: DistType, mesh: Mesh, layout: Layout | None = None) -> DistType:
        rules.check_dim(before, self.scatter_dim, "reduce_scatter: scatter_dim")
        rules.check_axes(mesh, self.mesh_axes, self.op)
        partial = rules.without_partial(mesh, before, self.mesh_axes, self.op)
        rules.check_divisible(mesh, before, self.scatter_dim, self.mesh_axes, self.op)
        dims = rules.replace_dim(before.dims, self.scatter_dim,
                            rules.appended(mesh, before.dims[self.scatter_dim], self.mesh_axes))
        return DistType(before.shape, dims, partial)

    def inverse(self, dims: list, partial: list) -> bool:
        if not rules.drop_suffix(dims, self.scatter_dim, self.mesh_axes):
            return False
        partial += self.mesh_axes
        return True

    def numpy_group(self, layout: Layout, row, blocks: list) -> list:
        total = dtypes.sum_blocks(blocks)
        return [np.ascontiguousarray(c) for c in np.split(total, len(row), axis=self.scatter_dim)]

    @staticmethod
    def busiest(k: int, local: int) -> int:
        return (k - 1) * (local // k)

    def merged(self, after: ReduceScatter, mesh: Mesh) -> ReduceScatter | None:
        if after.scatter_dim != self.scatter_dim:
            return None
        return ReduceScatter(self.scatter_dim, self.mesh_axes + after.mesh_axes, after.type_after)


#: A plan's step: any registered collective kind (the six above, or one defined elsewhere and registered).
Step = Collective
