"""Figures measured on this machine and stored in a file (the links' `redistribution.costs.CostModel`, the kernels'
`automatic.machine.Machine`): which file a process uses, read once per change."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from .environment import Variable, value

T = TypeVar("T")
_LOADED: dict = {}  # environment variable -> ((path, modification time), the figures read from it)


def chosen_figures(env: Variable, calibrated: Path, builtin: Callable[[], T], load: Callable[[Path], T]) -> T:
    """`$env` (a path, or `builtin` for the built-in figures), else the `calibrated` file if there is one, else the
    built-in figures. A file is read again only when it changes (callers ask for their figures at every use); a
    file `$env` names that cannot be read raises, as `load` says."""
    chosen = value(env) or ""
    if chosen == "builtin":
        return builtin()
    path = Path(chosen) if chosen else calibrated
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        if chosen:
            return load(path)  # raises, naming the file
        return builtin()
    cached = _LOADED.get(env)
    if cached is None or cached[0] != (str(path), stamp):
        cached = _LOADED[env] = ((str(path), stamp), load(path))
    return cached[1]


def read_figures(path: str | os.PathLike, what: str, rerun: str) -> tuple[dict, str]:
    """(the JSON object stored at `path`, ""), or ({}, what is wrong with the file: naming `what`, e.g. "the cost
    model", and the command that writes a good one, `rerun`) for the caller to raise as its own error."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        return {}, f"cannot read {what} {path}: {exc.strerror or exc}"
    except json.JSONDecodeError as exc:
        return {}, f"{what} {path} is not JSON ({exc}); rerun {rerun}"
    if not isinstance(data, dict):
        return {}, f"{what} {path} is not a JSON object; rerun {rerun}"
    return data, ""


def write_figures(path: Path, data: dict) -> Path:
    """Store `data` at `path` as JSON (its folder made if needed)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path
