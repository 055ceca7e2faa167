"""Each rank's own block of an input or result, without materialising the global array.

- `read_block`: the rank's block of a `.npy` file, read through a memory map
  (only the pages of that block are touched).
- `random_block`: deterministic pseudo-random data defined per *global element
  index*, so a rank can create just its block and the unpartitioned reference
  creates the whole array with the very same values.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from slicer.core.errors import InputError
from slicer.redistribution import DistType, Mesh
from slicer.redistribution.layout import Layout
from slicer.redistribution.numpy_semantics import block_slices


def rank_slices(mesh: Mesh, dist: DistType, rank: int) -> tuple[slice, ...]:
    """The index ranges of `rank`'s block of a value distributed as `dist`."""
    return block_slices(Layout.get(mesh, dist.shape), dist, rank)


def take_block(array: np.ndarray, dist: DistType, mesh: Mesh, rank: int) -> np.ndarray:
    """`rank`'s block of the global `array` as a C-contiguous array (0-d values stay 0-d, unlike
    `np.ascontiguousarray`)."""
    return np.require(array[rank_slices(mesh, dist, rank)], requirements="C")


def read_block(path: str | Path, dist: DistType, mesh: Mesh, rank: int, dtype: np.dtype) -> np.ndarray:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"input file '{path}' does not exist")
    try:
        array = np.load(path, mmap_mode="r")
    except (ValueError, OSError) as exc:
        raise InputError(f"input file '{path}' is not a readable .npy file: {exc}") from None
    if tuple(array.shape) != tuple(dist.shape) or array.dtype != np.dtype(dtype):
        raise InputError(f"input file '{path}' holds {array.dtype}{list(array.shape)}, but the program takes "
                         f"{np.dtype(dtype)}{list(dist.shape)}")
    return np.require(array[rank_slices(mesh, dist, rank)], requirements="C")  # keeps 0-d arrays 0-d


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
    if np.issubdtype(dtype, np.floating):
        unit = (z >> np.uint64(11)).astype(np.float64) / float(1 << 53)  # [0, 1)
        return (unit * 2.0 - 1.0).astype(dtype)
    if dtype == np.bool_:
        return (z & np.uint64(1)).astype(np.bool_)
    return ((z % np.uint64(17)).astype(np.int64) - 8).astype(dtype)


def random_block(seed: int, dist: DistType, mesh: Mesh, rank: int, dtype: np.dtype) -> np.ndarray:
    return random_values(seed, tuple(dist.shape), rank_slices(mesh, dist, rank), dtype)


def random_global(seed: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    return random_values(seed, tuple(shape), tuple(slice(0, n) for n in shape), dtype)
