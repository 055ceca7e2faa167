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
from functools import cache
from pathlib import Path

from slicer.core.names import MODULE_LOC_PREFIX

#: One frame of a location's text: `"file":line:col` (or unquoted, as a diagnostic prints it).
_FRAME = re.compile(r'"([^"]+)":(\d+):\d+|([^\s"():]+):(\d+):\d+')

#: The packages whose frames are not the user's.
_LIBRARIES = ("torch", "torch_mlir", "slicer")


@cache
def _library_dirs(names: tuple[str, ...] = _LIBRARIES) -> tuple[str, ...]:
    """The folders of the packages `names` (found without importing them), each ending in "/": as found and
    resolved (an editable install's link tree holds links to the checkout's files)."""
    dirs = []
    for name in names:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        for location in (spec.submodule_search_locations or []) if spec is not None else []:
            dirs += [str(Path(location).absolute()) + "/", str(Path(location).resolve()) + "/"]
    return tuple(dirs)


def frames(location) -> list[tuple[str, int]]:
    """Every `(file, line)` of `location` (an `ir.Location` or its text), innermost first."""
    return [(q or u, int(ql or ul)) for q, ql, u, ul in _FRAME.findall(str(location))]


def user_frame(location) -> tuple[str, int] | None:
    """The innermost frame of `location` in the user's code (outside torch, torch-mlir and Slicer); else the
    innermost frame of torch's own code (a function of torch imported as it is); None when the location has no
    Python frame (a program written as MLIR text has `file.mlir:line:col`) or only Slicer's."""
    return first_user_frame(frames(location))


def first_user_frame(stack) -> tuple[str, int] | None:
    """The first `(file, line)` of `stack` (innermost first, e.g. a traceback's frames reversed) in the user's
    code, else the first in torch's own code, else None (see `user_frame`)."""
    libraries, slicer = _library_dirs(), _library_dirs(("slicer",))
    candidates = []
    for file, line in stack:
        if not file.endswith(".py"):
            continue
        paths = (str(Path(file).absolute()), _resolved(file))  # a module imported through a link is either
        if not any(path.startswith(libraries) for path in paths):
            return file, line
        if not any(path.startswith(slicer) for path in paths):
            candidates.append((file, line))
    return candidates[0] if candidates else None


def _resolved(file: str) -> str:
    try:
        return str(Path(file).resolve())
    except OSError:
        return file


def source_line(location) -> str | None:
    """`file:line` of the user's frame of `location` (see `user_frame`), or None."""
    frame = user_frame(location)
    return f"{frame[0]}:{frame[1]}" if frame else None


_MODULE = re.compile(r'"' + re.escape(MODULE_LOC_PREFIX) + r'([^"]*)"')


def module_path(location) -> str | None:
    """The dotted path of the model's module that computed an op (`blocks.0.attn`), read from the
    `NameLoc("module:<path>", ...)` parts of its location (`core.names.MODULE_LOC_PREFIX`): for a location fused
    from several ops (an import-time fusion, a collective's provenance), the deepest module holding them all
    (`blocks.0` for `blocks.0.attn.proj` and `blocks.0`). When they share none, the first part's: MLIR's fusions
    put the rewritten op's own location first, then those of the constants folded into it, and a constant that
    many modules share carries any one's location (the attention mask's `-inf` folded into `blocks.3.attn`'s
    masked fill carried `wte`'s). None when it names no module, or the first part names the model itself."""
    paths = _MODULE.findall(str(location))
    if not paths:
        return None
    common = paths[0].split(".")
    for path in paths[1:]:
        parts = path.split(".")
        n = 0
        while n < min(len(common), len(parts)) and common[n] == parts[n]:
            n += 1
        common = common[:n]
    return ".".join(common) or paths[0] or None


__all__ = ["first_user_frame", "frames", "module_path", "source_line", "user_frame"]
