"""Whether this process's LLVM can generate code: not when another LLVM (torch-mlir's) was loaded first.

LLVM defines some tables as C++ inline variables, which the linker exports as unique symbols (`nm` type `u`):
the dynamic loader binds every library that defines one to the first definition loaded, whatever the scopes
and RTLD_DEEPBIND. torch-mlir ships its own LLVM, with the same symbol names and versions. Imported before
Slicer's MLIR (`import torch_mlir; import slicer`), its tables win, and MLIR's LLVM generates code reading
another version's tables: the runtime-library-call names come out shifted ("JIT session error: Symbols not
found: [ ockfile ]", then "Unknown function kernel_0"), or the JIT'd code calls garbage ("glibc detected an
invalid stdio handle", segmentation faults). MLIR's passes are unaffected (the AOT kernels, built by the LLVM
tools as processes, run right); only code generation inside this process (the ExecutionEngine) is.

`foreign_llvm_tables()` finds out by asking the loader where the name table of runtime library calls of MLIR's
LLVM lives (dladdr): in MLIR's `libLLVM.so` itself, or elsewhere. The JIT then builds its kernels with the
LLVM tools instead (`jit.py`). In the other order (Slicer's MLIR first) torch-mlir's tables are Slicer's and
torch-mlir runs no codegen in this process (its lowering runs in a child process: frontends/torch_lowering.py).
"""

from __future__ import annotations

import ctypes
import os
from functools import cache
from pathlib import Path

import mlir.ir

#: A unique symbol code generation reads: the names of the runtime library calls (memcpy, flockfile, ...).
TABLE = "_ZN4llvm5RTLIB19RuntimeLibcallsInfo34RuntimeLibcallImplNameTableStorageE"


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def _mlir_llvm_library() -> str | None:
    """The path of the LLVM shared library MLIR's Python bindings loaded (not torch-mlir's), or None."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            paths = {line.split()[-1] for line in maps if "/libLLVM" in line and ".so" in line}
    except OSError:
        return None
    near = str(Path(mlir.__path__[0]).resolve().parent)  # MLIR's wheel puts its LLVM next to it (llvm/lib)
    ours = sorted(p for p in paths if "torch_mlir" not in p)
    return next((p for p in ours if str(Path(p).resolve()).startswith(near)), ours[0] if ours else None)


@cache
def foreign_llvm_tables() -> bool:
    """True when MLIR's LLVM reads another LLVM's tables (see the module docstring): the ExecutionEngine must not
    generate code in this process. Asked once MLIR is loaded; False where the loader cannot say (not Linux)."""
    path = _mlir_llvm_library()
    if path is None or not hasattr(os, "RTLD_NOLOAD"):
        return False
    try:
        library = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        address = ctypes.addressof(ctypes.c_char.in_dll(library, TABLE))
        info = _DlInfo()
        if not ctypes.CDLL(None).dladdr(ctypes.c_void_p(address), ctypes.byref(info)) or not info.dli_fname:
            return False
    except (OSError, ValueError, AttributeError):
        return False  # no such symbol in this LLVM build: nothing to compare
    return os.path.realpath(info.dli_fname.decode()) != os.path.realpath(path)


__all__ = ["TABLE", "foreign_llvm_tables"]
