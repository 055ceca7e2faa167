"""Communicator groups over mesh axes and sub-axes, for the MPI executor (`plan_executor`).

A collective over ``axes`` (axes or sub-axes such as ``y:(2)2``, major to minor) runs within the groups
of devices that agree on every other part of the mesh; within a group a device's rank is its index over
``axes``. With whole axes only, the other parts are the other axes; with sub-axes, they also include the
parts of partly used axes that ``axes`` leave out (``y:(1)2`` for a group over ``y:(2)2``). This module
computes, for one device, the ``(color, key)`` of ``MPI_Comm_split`` that builds its group, and the chunk
order of a reordering all-to-all. Pure arithmetic on mesh coordinates; no MPI import.
"""

from __future__ import annotations

from collections.abc import Sequence

from slicer.core.mesh import Mesh
from slicer.redistribution import subaxes
from slicer.redistribution.layout import complement


def coordinate(mesh: Mesh, coords: dict[str, int], axis: str) -> int:
    """A device's coordinate along the axis or sub-axis ``axis`` (``coords``: its whole-axis coordinates)."""
    name, _, k, stride = subaxes.extent(mesh, axis)
    return (coords[name] // stride) % k


def group_index(mesh: Mesh, coords: dict[str, int], axes: Sequence[str]) -> int:
    """A device's index in its group over ``axes`` (row-major, first listed axis most significant)."""
    index = 0
    for axis in axes:
        index = index * subaxes.size(mesh, axis) + coordinate(mesh, coords, axis)
    return index


def color_key(mesh: Mesh, coords: dict[str, int], axes: Sequence[str]) -> tuple[int, int]:
    """``(color, key)`` for ``MPI_Comm_split``: the color names the device's group over ``axes`` (its index
    over every other part of the mesh), the key orders the group by the index over ``axes``."""
    return group_index(mesh, coords, complement(mesh, tuple(axes))), group_index(mesh, coords, axes)


def chunk_order(mesh: Mesh, axes: Sequence[str], order: Sequence[str]) -> list[int]:
    """For a reordering all-to-all over ``axes`` whose split dim gains the axes in ``order``: entry ``j`` is
    the chunk (of the split dim) that member ``j`` of the group (index over ``axes``) receives -- its index
    over ``order``."""
    parts = subaxes.atoms(mesh, list(axes) + list(order))
    fine, wanted = subaxes.expand(parts, axes), subaxes.expand(parts, order)
    sizes = [subaxes.size(mesh, a) for a in fine]
    out = []
    for j in range(subaxes.group_size(mesh, axes)):
        digits, rest = {}, j
        for a, k in zip(reversed(fine), reversed(sizes)):
            digits[a], rest = rest % k, rest // k
        index = 0
        for a in wanted:
            index = index * subaxes.size(mesh, a) + digits[a]
        out.append(index)
    return out
