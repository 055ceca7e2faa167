"""Where the MLIR/LLVM tools and runtime libraries of this install live.

The code imports `mlir` like any build of the upstream bindings; this module
only looks in the places a pip install puts things (the `mlir` package's
`bin/`/`lib/`, an `llvm` package's `bin/`) and then on PATH.
"""

from __future__ import annotations

import shutil
from pathlib import Path


def _package_dir(name: str) -> Path | None:
    try:
        module = __import__(f"{name}.ir" if name == "mlir" else name, fromlist=["_"])
    except ImportError:
        return None
    file = getattr(module, "__file__", None)
    return Path(file).parent if file else None


def find_tool(name: str) -> str | None:
    """Absolute path of the MLIR/LLVM tool `name` (e.g. mlir-opt, FileCheck, llc), or None."""
    for package in ("mlir", "llvm"):
        root = _package_dir(package)
        if root is not None and (root / "bin" / name).is_file():
            return str(root / "bin" / name)
    return shutil.which(name)


def runner_utils_libraries() -> list[str]:
    """The MLIR C runner utils shared library if installed (some memref copies call into it)."""
    root = _package_dir("mlir")
    for folder in (root / "lib", root / "_mlir_libs") if root else ():
        lib = folder / "libmlir_c_runner_utils.so"
        if lib.is_file():
            return [str(lib)]
    return []
