"""Packing blocks for MPI: every collective step as moves of contiguous buffers.

Every non-contiguous exchange of a step is one rearrangement: a block of shape ``S`` cut into ``k`` equal
chunks along an axis ``a`` is, in memory, ``(outer, k, inner)`` with ``outer = prod(S[:a])`` and ``inner =
S[a] / k * prod(S[a+1:])`` elements, while MPI wants the chunks one after the other, ``(k, outer, inner)``.
:class:`Chunks` moves between the two with one numpy strided copy. all_gather unpacks its received chunks
into the gathered dim, all_to_all packs the chunks of its split dim and unpacks those of its concat dim,
reduce_scatter packs the chunks of its scatter dim, all_slice copies one chunk. When ``outer == 1`` (the dim
is leading, possibly after dims of size 1) or ``k == 1`` the two layouts coincide and nothing is copied: MPI
reads and writes the blocks directly.

Why numpy copies (measured in benchmarks/README.md, "Packing"): MPICH moves large intranode messages with a
single-copy protocol (CMA) only for contiguous buffers; a strided vector datatype goes in many small pieces,
slower than packing, more so with more ranks than cores. The copy views each run of ``inner`` elements as one
opaque ``void`` element, so numpy's inner loop is a strided copy of whole runs (faster than element-wise for
short runs, and as fast as a C loop of ``memcpy`` calls compiled with -O3; for large blocks with short runs
both are bound by the memory system).
"""

from __future__ import annotations

import numpy as np

from slicer.core.errors import RunError


def prod(xs) -> int:
    out = 1
    for x in xs:
        out *= int(x)
    return out


def copy_runs(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src`` for views of equal shape and dtype; when both have a contiguous last axis, each row
    of it moves as one ``void`` element (numpy's element-wise strided loop is slower on short rows)."""
    n = dst.shape[-1] * dst.itemsize if dst.ndim else 0
    if n and dst.strides[-1] == dst.itemsize and src.strides[-1] == src.itemsize and dst.size:
        kind = np.dtype((np.void, n))
        np.copyto(dst.view(kind)[..., 0], src.view(kind)[..., 0])
    else:
        np.copyto(dst, src)


def chunked_shape(shape: tuple[int, ...], axis: int, k: int) -> tuple[int, ...]:
    """The shape of one of the ``k`` chunks of a block of ``shape`` along ``axis``."""
    return tuple(n // k if i == axis else n for i, n in enumerate(shape))


class Chunks:
    """A block of ``shape`` (C order, ``dtype``) cut into ``k`` chunks along ``axis``, and the packed layout
    of those chunks one after the other (``(k, *chunk_shape)``, C order)."""

    def __init__(self, shape: tuple[int, ...], axis: int, k: int, dtype):
        self.shape, self.axis, self.k, self.dtype = tuple(shape), axis, k, np.dtype(dtype)
        self.chunk_shape = chunked_shape(self.shape, axis, k)
        self.packed_shape = (k,) + self.chunk_shape
        self.outer = prod(self.shape[:axis])
        self.inner = prod(self.chunk_shape[axis:])
        self.run_bytes = self.inner * self.dtype.itemsize
        # identical layouts: the block is its packed form (a reshape, no copy)
        self.contiguous = self.outer == 1 or k == 1 or self.run_bytes == 0 or self.outer * k * self.inner == 0

    def _runs(self, array: np.ndarray, packed: bool) -> np.ndarray:
        """``array`` as a 2-D array of ``void`` runs: ``(k, outer)`` when ``packed`` else ``(outer, k)``."""
        if not array.flags.c_contiguous:  # reshape(-1) would copy, and writes would be lost
            raise RunError(f"packing needs C-contiguous blocks, got strides {array.strides}; pass "
                           "np.ascontiguousarray(block)")
        rows = (self.k, self.outer) if packed else (self.outer, self.k)
        flat = array.reshape(-1).view(np.uint8).reshape(rows + (self.run_bytes,))
        return flat.view(np.dtype((np.void, self.run_bytes)))[..., 0]

    def pack(self, block: np.ndarray, packed: np.ndarray, skip: int | None = None,
             order: list[int] | None = None) -> None:
        """``packed[j] = chunk order[j] of block`` (``order`` defaults to the identity; both C-contiguous; not
        needed when ``contiguous`` without ``order``), for every ``j`` but ``skip``."""
        dst, src = self._runs(packed, True), self._runs(block, False).T
        if order is not None:
            for j, chunk in enumerate(order):
                if j != skip:
                    np.copyto(dst[j], src[chunk])
            return
        if skip is None:
            np.copyto(dst, src)
        else:
            np.copyto(dst[:skip], src[:skip])
            np.copyto(dst[skip + 1:], src[skip + 1:])

    def unpack(self, packed: np.ndarray, block: np.ndarray) -> None:
        """``chunk j of block = packed[j]`` (both C-contiguous; not needed when ``contiguous``)."""
        np.copyto(self._runs(block, False), self._runs(packed, True).T)

    def unpack_rows(self, rows: np.ndarray, block: np.ndarray, skip: int | None = None) -> None:
        """``chunk j of block = rows[j]`` for a ``(k, chunk elements)`` array whose rows are contiguous but
        may lie anywhere (e.g. in other ranks' shared memory), for every ``j`` but ``skip``."""
        if self.contiguous:
            dst, src = block.reshape(rows.shape), rows
        else:
            runs = rows.view(np.uint8).reshape(self.k, self.outer, self.run_bytes)
            dst, src = self._runs(block, False).T, runs.view(np.dtype((np.void, self.run_bytes)))[..., 0]
        if skip is None:
            np.copyto(dst, src)
        else:
            np.copyto(dst[:skip], src[:skip])
            np.copyto(dst[skip + 1:], src[skip + 1:])

    def chunk_view(self, block: np.ndarray, j: int) -> np.ndarray:
        """Chunk ``j`` of ``block`` as a view (contiguous when ``contiguous``)."""
        index = [slice(None)] * len(self.shape)
        n = self.chunk_shape[self.axis]
        index[self.axis] = slice(j * n, (j + 1) * n)
        return block[tuple(index)]

    def copy_chunk(self, block: np.ndarray, j: int, out: np.ndarray) -> None:
        """``out = chunk j of block`` (``out`` C-contiguous of ``chunk_shape``)."""
        if self.run_bytes == 0 or out.size == 0:
            return
        if self.contiguous:
            np.copyto(out, self.chunk_view(block, j))
            return
        np.copyto(out.reshape(-1).view(np.uint8).reshape(self.outer, self.run_bytes).view(
            np.dtype((np.void, self.run_bytes)))[:, 0], self._runs(block, False)[:, j])
