"""Kernel inputs placed against a page with no access, so that a kernel reading past an operand faults.

Reading past an operand usually goes unseen: the bytes there are mapped, and the lanes that read them are thrown away
(the contraction kernels' packing loaded whole panels of a narrower tile, right answers every time). It faults only
where the operand ends at the end of mapped memory, which one rank's heap happened to do in the fuzzer's convnet
training step. The AOT stage (`execute._run_aot`) runs every kernel on such copies, alternating a guard after the
last byte and before the first, so that a read past either edge is a crash, classified as an internal error."""

from __future__ import annotations

import ctypes
import mmap

import numpy as np

_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def guarded_copy(array: np.ndarray, at_end: bool, keep: list) -> np.ndarray:
    """A C-contiguous copy of `array` whose last byte (`at_end`) or first byte comes right before or after a page
    with no access; its mapping is appended to `keep`, which must outlive the copy's use."""
    array = np.asarray(array, order="C")  # (not ascontiguousarray: it makes a 0-d array 1-d)
    if array.nbytes == 0:
        return array
    page = mmap.PAGESIZE
    pages = (array.nbytes + page - 1) // page + 1
    buffer = mmap.mmap(-1, pages * page, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buffer))
    guard = base + (pages - 1) * page if at_end else base
    start = guard - array.nbytes if at_end else base + page
    copy = np.frombuffer(buffer, dtype=array.dtype, count=array.size, offset=start - base).reshape(array.shape)
    copy[...] = array
    if _LIBC.mprotect(ctypes.c_void_p(guard), page, 0) != 0:
        raise OSError(ctypes.get_errno(), "mprotect of a guard page failed")
    keep.append(buffer)
    return copy


class GuardedInputs:
    """A kernel called on guarded copies of its inputs (see the module docstring)."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.calls = 0

    def __call__(self, *arrays):
        at_end = self.calls % 2 == 0
        self.calls += 1
        keep: list = []
        return self.kernel(*[guarded_copy(a, at_end, keep) for a in arrays])
