"""A rank process keeps the memory it frees for its next blocks instead of handing it back to the kernel.

Every kernel call writes into fresh output arrays (numpy's, through malloc), and a rank frees each block after
its last use: a training step allocates and frees the same parameter-sized blocks on every step. glibc's
malloc returns a freed block above its mmap threshold (dynamic, at most 32 MiB) to the kernel and trims the
heap's top beyond its trim threshold (twice that), so the next block of that size is a fresh mapping whose
every page faults and is zeroed on first touch: several times the time of a kernel with large results.

`keep_freed_memory()` fixes both thresholds (`mallopt`), as PyTorch's CPU performance guide gets by
preloading jemalloc or tcmalloc, which this package cannot depend on. The mmap threshold cannot go past
32 MiB (glibc's largest), and a model's largest blocks are larger (GPT-2's token embedding, its gradient and
its two AdamW moments, 154 MiB each; its logits, 51 MiB per 256 tokens): so the main heap serves every size
(`M_MMAP_MAX` 0: no block of its own mapping). Mapped afresh at every step, those blocks faulted on every
page (with transparent huge pages, a fault may also wait for the kernel to compact memory): GPT-2 small's
AdamW update of its embedding ran several times slower so (benchmarks/README.md). (A thread's arena still
maps a block larger than its heap: glibc's fallback.) It is called by the processes Slicer starts as ranks
(`runtime.jobs.rank_server`), not in a user's own process. The cost: a rank holds on to its peak of
live blocks until it exits, which it reaches on every run anyway. Elsewhere than glibc nothing changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_MMAP_MAX = -4
"""`mallopt` parameters, from glibc's <malloc.h>."""

MMAP_THRESHOLD_BYTES = 32 << 20
"""Blocks up to this size come from the heap: glibc's largest accepted value (`DEFAULT_MMAP_THRESHOLD_MAX`)."""
TRIM_THRESHOLD_BYTES = 2**31 - 1
"""Free memory at the heap's top is trimmed only past 2 GiB (`mallopt` takes an int: its largest value)."""


def keep_freed_memory() -> bool:
    """Make this process's malloc reuse the memory it frees (see the module docstring); True if it took
    effect (glibc), False where there is no `mallopt`."""
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    settings = ((M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES), (M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES), (M_MMAP_MAX, 0))
    return all([bool(mallopt(parameter, value)) for parameter, value in settings])
