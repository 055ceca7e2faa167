"""Where every device's block lies: vectorised per-device geometry of distributed types on a mesh.

Used by the typing rules (permute validity), the cost model (bytes received, lower bound) and the
simulator. All arrays are indexed by device linear rank (row-major mesh coordinates). Axes may be
sub-axes (``y:(1)2``, see `subaxes`): a device's coordinate along one is derived from its coordinate along
the whole axis.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from slicer.core.mesh import Mesh

from . import subaxes
from .types import DistType


class Layout:
    """Per-device geometry of types of one global ``shape`` on one ``mesh`` (caches per axis group)."""

    def __init__(self, mesh: Mesh, shape: tuple[int, ...]):
        self.mesh = mesh
        self.shape = tuple(shape)
        n = mesh.device_count
        ranks = np.arange(n, dtype=np.int64)
        coords = []
        for size in reversed(mesh.shape):
            coords.append(ranks % size)
            ranks = ranks // size
        self.coords = {name: c for name, c in zip(mesh.axis_names, reversed(coords))}
        self._axis_coords: dict[str, np.ndarray] = {}
        self.device_count = n
        self._group_cache: dict[tuple[str, ...], np.ndarray] = {}
        self._id_cache: dict[tuple[tuple, tuple], np.ndarray] = {}  # (dims, partial) -> ids
        self._overlap_cache: dict = {}

    @staticmethod
    @lru_cache(maxsize=64)
    def get(mesh: Mesh, shape: tuple[int, ...]) -> Layout:
        """A shared (cached) layout for ``mesh`` and ``shape``."""
        return Layout(mesh, tuple(shape))

    def coord(self, axis: str) -> np.ndarray:
        """Each device's coordinate along the axis or sub-axis ``axis``."""
        found = self.coords.get(axis)
        if found is None:
            found = self._axis_coords.get(axis)
            if found is None:
                name, _, k, stride = subaxes.extent(self.mesh, axis)
                found = self._axis_coords[axis] = (self.coords[name] // stride) % k
        return found

    def group_index(self, axes: tuple[str, ...]) -> np.ndarray:
        """Each device's linear index within its group over ``axes`` (major to minor)."""
        cached = self._group_cache.get(axes)
        if cached is None:
            cached = np.zeros(self.device_count, dtype=np.int64)
            for axis in axes:
                cached = cached * subaxes.size(self.mesh, axis) + self.coord(axis)
            self._group_cache[axes] = cached
        return cached

    def group_key(self, axes: tuple[str, ...]) -> np.ndarray:
        """Identifies each device's group over ``axes``: its linear index over all the *other* parts of the
        mesh (whole axes not in ``axes``, and the parts of partly used axes that ``axes`` leave out)."""
        return self.group_index(complement(self.mesh, axes))

    def block_ranges(self, t: DistType) -> list[tuple[np.ndarray, int]]:
        """Per dim: (start offsets per device, local length)."""
        out = []
        for size, axes in zip(self.shape, t.dims):
            length = size // subaxes.group_size(self.mesh, axes)
            out.append((self.group_index(axes) * length, length))
        return out

    def block_ids(self, t: DistType) -> np.ndarray:
        return self.ids_of(t.dims, t.partial)

    def ids_of(self, dims: tuple, partial: tuple) -> np.ndarray:
        """An id per device equal for two devices iff they hold the same block *and* the same partial-sum
        contribution index (coordinates along the non-trivial partial axes). Comparable between types with
        equal local shapes and equal non-trivial partial axes."""
        key = (dims, partial)
        cached = self._id_cache.get(key)
        if cached is None:
            cached = np.zeros(self.device_count, dtype=np.int64)
            for axes in dims:
                cached = cached * subaxes.group_size(self.mesh, axes) + self.group_index(axes)
            for axis in partial:
                cached = cached * subaxes.size(self.mesh, axis) + self.coord(axis)
            self._id_cache[key] = cached
        return cached

    def overlap(self, a: DistType, b: DistType) -> np.ndarray:
        """Per device: number of elements shared by its block under ``a`` and under ``b``."""
        return self.overlap_dims(a.dims, b.dims)

    def overlap_dims(self, dims_a: tuple, dims_b: tuple) -> np.ndarray:
        total = None
        for d, (size, da, db) in enumerate(zip(self.shape, dims_a, dims_b)):
            key = (d, da, db)
            ov = self._overlap_cache.get(key)
            if ov is None:
                la, lb = size // subaxes.group_size(self.mesh, da), size // subaxes.group_size(self.mesh, db)
                sa, sb = self.group_index(da) * la, self.group_index(db) * lb
                ov = np.maximum(np.minimum(sa + la, sb + lb) - np.maximum(sa, sb), 0)
                self._overlap_cache[key] = ov
            total = ov if total is None else total * ov
        if total is None:
            return np.ones(self.device_count, dtype=np.int64)
        return total


def groups(layout: Layout, axes: tuple[str, ...]) -> np.ndarray:
    """Rows of device ranks, one row per group over ``axes``, each row in group-index order."""
    k = subaxes.group_size(layout.mesh, axes)
    order = np.lexsort((layout.group_index(axes), layout.group_key(axes)))
    return order.reshape(-1, k)


def complement(mesh: Mesh, axes: tuple[str, ...]) -> tuple[str, ...]:
    """The parts of the mesh that ``axes`` (axes or sub-axes) leave out, in mesh order: whole axes that
    ``axes`` do not touch, and the gaps of axes they use in part."""
    if not any(subaxes.is_sub_axis(a) for a in axes):
        return tuple(a for a in mesh.axis_names if a not in axes)
    used: dict[str, list] = {}
    for a in axes:
        name, pre, k, _ = subaxes.extent(mesh, a)
        used.setdefault(name, []).append((pre, pre * k))
    out = []
    for name, n in mesh.axes:
        if name not in used:
            out.append(name)
            continue
        at = 1
        for pre, end in sorted(used[name]) + [(n, n)]:
            if pre > at:
                out.append(subaxes.token(name, at, pre // at, n))
            at = max(at, end)
    return tuple(out)


def nontrivial_partial(mesh: Mesh, t: DistType) -> tuple[str, ...]:
    return tuple(a for a in t.partial if subaxes.size(mesh, a) > 1)


def lower_bound_elements(layout: Layout, src: DistType, dst: DistType) -> np.ndarray:
    """Per device: elements of its target block it does not already hold.

    A device holding only a partial-sum contribution (a non-trivial partial axis of ``src`` that ``dst``
    does not keep) holds none of its target values: it must receive something for every element.
    """
    mesh = layout.mesh
    target = dst.local_size(mesh)
    if set(nontrivial_partial(mesh, src)) - set(dst.partial):
        return np.full(layout.device_count, target, dtype=np.int64)
    return target - layout.overlap(src, dst)
