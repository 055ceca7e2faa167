"""Saved inputs that reproduce a failure: one file per distinct input, and the command that replays it.

Used by `slicer-opt` (a failing pipeline) and by the stages that stop on a budget (propagation that does not
converge): both print a ready-to-paste `slicer-opt` command on a copy of the stage's input."""

from __future__ import annotations

import hashlib
import shlex
import tempfile
from pathlib import Path


def save_reproducer(module_text: str, pipeline: str) -> str:
    """Save `module_text` (the failing stage's input) and return the command that runs `pipeline` on it."""
    digest = hashlib.sha256((module_text + pipeline).encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"slicer-repro-{digest}.mlir"
    path.write_text(module_text)
    return f"slicer-opt --pass-pipeline={shlex.quote(pipeline)} {shlex.quote(str(path))}"
