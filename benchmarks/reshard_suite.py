"""The benchmark suite of reshards, shared by the benchmark, the CLI checks and the MPI tests.

Cases cover replicate <-> tiled, dim moves, axis swaps across and within dims, 3-D meshes, partially
replicated sources and partial sums, on 2-D and 3-D meshes for a given number of devices, and sub-axes:
types written with parts of an axis (``w:(1)2``) on a 1-D mesh, partial sums over a part, and a
reordering all-to-all.
"""

from __future__ import annotations

from dataclasses import dataclass

from slicer.core.mesh import Mesh
from slicer.redistribution.types import DistType, itemsize


@dataclass(frozen=True)
class Case:
    name: str
    mesh: Mesh
    shape: tuple[int, ...]
    src: DistType
    dst: DistType


def _meshes(devices: int) -> tuple[Mesh, Mesh, Mesh]:
    if devices < 4 or devices & (devices - 1):
        raise ValueError(f"the suite needs a power-of-two device count >= 4, got {devices}")
    return Mesh(x=2, y=devices // 2), Mesh(x=2, y=2, z=devices // 4), Mesh(w=devices)


def _side(total_bytes: int, rank: int, dtype: str, multiple: int) -> int:
    side = int(round((total_bytes / itemsize(dtype)) ** (1.0 / rank)))
    return max(multiple, side // multiple * multiple)


def cases(devices: int = 4, bytes_per_array: int = 1 << 20, dtype: str = "f32") -> list[Case]:
    """All suite cases for ``devices`` ranks with global arrays of about ``bytes_per_array`` bytes."""
    m2, m3, m1 = _meshes(devices)
    rest = f"w:(2){devices // 2}"  # the minor part of w left by its major half w:(1)2
    mult = 4 * devices
    s2 = _side(bytes_per_array, 2, dtype, mult)
    s3 = _side(bytes_per_array, 3, dtype, mult)
    specs = [
        ("replicate_to_tiled", m2, (s2, s2), "[[],[]]", "[[x],[y]]"),
        ("tiled_to_replicate", m2, (s2, s2), "[[x],[y]]", "[[],[]]"),
        ("dim_move", m2, (s2, s2), "[[x,y],[]]", "[[],[x,y]]"),
        ("swap_across_dims", m2, (s2, s2), "[[x],[y]]", "[[y],[x]]"),
        ("swap_within_dim", m2, (s2, s2), "[[x,y],[]]", "[[y,x],[]]"),
        ("partially_replicated_src", m2, (s2, s2), "[[x],[]]", "[[y],[x]]"),
        ("row_to_col_1axis", m2, (s2, s2), "[[y],[]]", "[[],[y]]"),
        ("partial_to_tiled", m2, (s2, s2), "[[x],[]] partial=[y]", "[[x],[y]]"),
        ("partial_to_replicated", m2, (s2, s2), "[[],[]] partial=[x,y]", "[[],[]]"),
        ("mesh3d_rotate", m3, (s3, s3, s3), "[[x],[y],[z]]", "[[z],[x],[y]]"),
        ("mesh3d_merge_split", m3, (s2, s2), "[[x,y],[z]]", "[[z],[y,x]]"),
        ("mesh3d_partial_replicated", m3, (s3, s3, s3), "[[x],[],[]]", "[[],[y],[z,x]]"),
        ("reorder_all_to_all", m3, (s3, s3, s3), "[[x,y,z],[],[]]", "[[],[],[z,y,x]]"),
        ("subaxes_split_1d", m1, (s2, s2), "[[w],[]]", f"[[w:(1)2],[{rest}]]"),
        ("subaxes_transpose_1d", m1, (s2, s2), f"[[w:(1)2],[{rest}]]", f"[[{rest}],[w:(1)2]]"),
        ("subaxes_partial_1d", m1, (s2, s2), "[[],[]] partial=[w]", f"[[w:(1)2],[]] partial=[{rest}]"),
    ]
    return [Case(name, mesh, shape, DistType.parse(src, shape, mesh), DistType.parse(dst, shape, mesh))
            for name, mesh, shape, src, dst in specs]
