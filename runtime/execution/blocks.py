"""Each rank's own block of an input or result, without materialising the global array.

- `read_block`: the rank's block of a `.npy` file, read through a memory map
  (only the pages of that block are touched).
- `random_block`: deterministic pseudo-random data defined per *global element
  index*, so a rank can create just its block and the unpartitioned reference
  creates the whole array with the very same values.

A value whose dims do not divide their tiles has a padded type (docs/partition.md,
"Uneven shapes"): its type's shape rounds those dims up, and a device's block is
its rows of the logical array followed by zeros (`shape` is the logical shape).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from slicer.core import dtypes
from slicer.core.errors import InputError
from slicer.redistribution import DistType, Mesh
from slicer.redistribution.layout import Layout
from slicer.redistribution.numpy_semantics import block_slices


def rank_slices(mesh: Mesh, dist: DistType, rank: int) -> tuple[slice, ...]:
    """The index ranges of `rank`'s block of a value distributed as `dist`."""
    return block_slices(Layout.get(mesh, dist.shape), dist, rank)


def take_block(array: np.ndarray, dist: DistType, mesh: Mesh, rank: int) -> np.ndarray:
    """`rank`'s block of the global `array` as a C-contiguous array (0-d values stay 0-d, unlike
    `np.ascontiguousarray`); an array smaller than `dist`'s padded shape gives blocks padded with zeros."""
    where = rank_slices(mesh, dist, rank)
    if tuple(array.shape) == tuple(dist.shape):
        return np.require(array[where], requirements="C")
    return padded(array[clamped(where, array.shape)], where)


def clamped(where: tuple[slice, ...], shape: tuple[int, ...]) -> tuple[slice, ...]:
    """The index ranges `where` (in a padded shape) cut to the logical `shape`."""
    return tuple(slice(min(s.start, n), min(s.stop, n)) for s, n in zip(where, shape))


def padded(part: np.ndarray, where: tuple[slice, ...]) -> np.ndarray:
    """`part` followed by zeros up to the extents of `where` (a device's padded block)."""
    extents = [(0, (s.stop - s.start) - n) for s, n in zip(where, part.shape)]
    return np.require(np.pad(part, extents) if any(e for _, e in extents) else part, requirements="C")


def pad_global(array: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The global `array` followed by zeros up to the padded `shape`."""
    extents = [(0, n - m) for n, m in zip(shape, array.shape)]
    return np.pad(array, extents) if any(e for _, e in extents) else array


def read_block(path: str | Path, dist: DistType, mesh: Mesh, rank: int, dtype: np.dtype,
               shape: tuple[int, ...] | None = None) -> np.ndarray:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"input file '{path}' does not exist")
    try:
        array = dtypes.from_npy(np.load(path, mmap_mode="r"), dtype)
    except (ValueError, OSError) as exc:
        raise InputError(f"input file '{path}' is not a readable .npy file: {exc}") from None
    shape = tuple(dist.shape) if shape is None else tuple(shape)
    if tuple(array.shape) != shape or array.dtype != np.dtype(dtype):
        raise InputError(f"input file '{path}' holds {array.dtype}{list(array.shape)}, but the program takes "
                         f"{np.dtype(dtype)}{list(shape)}")
    return take_block(array, dist, mesh, rank)  # keeps 0-d arrays 0-d


def random_values(seed: int, shape: tuple[int, ...], slices: tuple[slice, ...], dtype: np.dtype) -> np.ndarray:
    """Values at global indices `slices` of a pseudo-random array of `shape` (a hash of the index)."""
    grids = np.meshgrid(*[np.arange(s.start or 0, s.stop if s.stop is not None else n) for s, n in zip(slices, shape)],
                        indexing="ij")
    index = np.ravel_multi_index(grids, shape).astype(np.uint64) if shape else np.zeros((), np.uint64)
    # SplitMix64 finaliser of (index, seed): well-mixed 64-bit values per element
    # (arithmetic modulo 2**64 is the point, hence no overflow warnings).
    with np.errstate(over="ignore"):
        z = index + np.uint64(0x9E3779B97F4A7C15) * np.uint64(seed + 1)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    dtype = np.dtype(dtype)
    if dtypes.is_float(dtype):
        unit = (z >> np.uint64(11)).astype(np.float64) / float(1 << 53)  # [0, 1)
        return (unit * 2.0 - 1.0).astype(dtype)
    if dtype == np.bool_:
        return (z & np.uint64(1)).astype(np.bool_)
    return ((z % np.uint64(17)).astype(np.int64) - 8).astype(dtype)


def random_block(seed: int, dist: DistType, mesh: Mesh, rank: int, dtype: np.dtype,
                 shape: tuple[int, ...] | None = None) -> np.ndarray:
    """`rank`'s block of `random_global(seed, shape, dtype)` (`shape`: the logical shape, default the type's)."""
    shape = tuple(dist.shape) if shape is None else tuple(shape)
    where = rank_slices(mesh, dist, rank)
    if shape == tuple(dist.shape):
        return random_values(seed, shape, where, dtype)
    return padded(random_values(seed, shape, clamped(where, shape), dtype), where)


def random_global(seed: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    return random_values(seed, tuple(shape), tuple(slice(0, n) for n in shape), dtype)
