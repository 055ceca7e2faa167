"""A rank process's malloc keeps the blocks it frees (runtime/jobs/heap.py): a kernel's next parameter-sized output
reuses heap memory instead of a fresh mapping that faults on every page."""

import platform
import subprocess
import sys

import pytest

PROBE = """
import ctypes, sys
import numpy as np
from slicer.runtime.jobs.heap import keep_freed_memory

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "keep":
    assert keep_freed_memory()
mapped, size = [], int(sys.argv[2])
for _ in range(3):
    block = np.ones(size, np.uint8)  # an output, written, then freed
    mapped.append(libc.mallinfo2().hblkhd)
    del block
print(libc.mallinfo2().fordblks >= size, max(mapped) >= size)
"""


def _run(mode: str, size: int) -> str:
    done = subprocess.run([sys.executable, "-c", PROBE, mode, str(size)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc and mallopt")
@pytest.mark.slow
@pytest.mark.parametrize("size", [4 << 20, 64 << 20], ids=["4MiB", "64MiB"])
def test_a_freed_block_stays_in_the_heap_for_the_next_one(size):
    # By default glibc maps a block of 4 MiB or more of its own and unmaps it on free; kept, it comes from the
    # heap and stays there, free, for the next block: past the largest mmap threshold too (64 MiB: an embedding
    # table's gradient).
    kept_free, mapped = _run("keep", size)
    assert (kept_free, mapped) == ("True", "False")
    kept_free, mapped = _run("default", size)
    assert mapped == "True"
