"""The Python source line behind an op of an imported model, from its MLIR location.

torch-mlir's fx importer gives every op the call stack torch.export recorded for it, as nested call-site
locations: `callsite("torch/nn/modules/linear.py":134:0 at callsite("model.py":67:0 at ...))`, innermost frame
first. The line a user wrote is the innermost frame outside torch, torch-mlir and Slicer (`model.py:67`, not
`linear.py:134`). Read from the location's text, so it works for a location of any MLIR build (Slicer's, or
torch-mlir's own bindings), and needs no torch.
"""

from __future__ import annotations

import importlib.util
import re
from functools import lru_cache
from pathlib import Path

#: One frame of a location's text: `"file":line:col`.
_FRAME = re.compile(r'"([^"]+)":(\d+):\d+')

#: The packages whose frames are not the user's.
_LIBRARIES = ("torch", "torch_mlir", "slicer")


@lru_cache(maxsize=None)
def _library_dirs() -> tuple[str, ...]:
    dirs = []
    for name in _LIBRARIES:
        try:
            spec = importlib.util.find_spec(name)  # finds a top-level package without importing it
        except (ImportError, ValueError):
            spec = None
        for location in (spec.submodule_search_locations or []) if spec is not None else []:
            dirs.append(str(Path(location).resolve()) + "/")
    return tuple(dirs)


def frames(location) -> list[tuple[str, int]]:
    """Every `(file, line)` of `location` (an `ir.Location` or its text), innermost first."""
    return [(f, int(l)) for f, l in _FRAME.findall(str(location))]


def user_frame(location) -> tuple[str, int] | None:
    """The innermost frame of `location` in the user's code (outside torch, torch-mlir and Slicer), or None
    when the location has no Python frame (a program written as MLIR text has `file.mlir:line:col`)."""
    found = frames(location)
    python = [(f, l) for f, l in found if f.endswith(".py")]
    if not python:
        return None
    libraries = _library_dirs()
    for file, line in python:
        try:
            resolved = str(Path(file).resolve())
        except OSError:
            resolved = file
        if not resolved.startswith(libraries):
            return file, line
    return python[0]  # only library frames (a function of torch's own): the innermost


def source_line(location) -> str | None:
    """`file:line` of the user's frame of `location` (see `user_frame`), or None."""
    frame = user_frame(location)
    return f"{frame[0]}:{frame[1]}" if frame else None


__all__ = ["frames", "source_line", "user_frame"]
