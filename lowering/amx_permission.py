"""The AMX tile state a process must ask Linux for before its first tile instruction.

Linux enables the AMX tile data (8 KiB of register state per thread) only for processes that ask:
`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`; without it the first `ldtilecfg` kills the process
with SIGILL. Kernels that contain tile code (the module had `slicer.uses_amx`, recorded in the library's meta)
ask once per process before they are called: the launcher, the simulator, every MPI rank (they all load
kernels through `KernelLibrary`), and the JIT. The permission is per process and inherited by threads
created afterwards, which is why it is asked for at load time, before any kernel runs.
"""

from __future__ import annotations

import ctypes
import os
import threading

from slicer.core.errors import KernelError

SYS_ARCH_PRCTL = 158  # x86-64
ARCH_REQ_XCOMP_PERM = 0x1023
XFEATURE_XTILEDATA = 18

_lock = threading.Lock()
_granted = False


def request_amx() -> None:
    """Ask Linux once for the AMX tile state of this process; a KernelError if it refuses (no AMX, old kernel)."""
    global _granted
    with _lock:
        if _granted:
            return
        libc = ctypes.CDLL(None, use_errno=True)
        result = libc.syscall(ctypes.c_long(SYS_ARCH_PRCTL), ctypes.c_long(ARCH_REQ_XCOMP_PERM),
                              ctypes.c_long(XFEATURE_XTILEDATA))
        if result != 0:
            errno = ctypes.get_errno()
            raise KernelError(
                f"these kernels use AMX tiles but Linux refused the tile state (arch_prctl(ARCH_REQ_XCOMP_PERM, "
                f"XFEATURE_XTILEDATA): {os.strerror(errno)}); this CPU or kernel (Linux >= 5.16) lacks AMX: "
                "compile for it with the slicer-kernel-contract option bf16-units=avx512bf16 or f32")
        _granted = True
