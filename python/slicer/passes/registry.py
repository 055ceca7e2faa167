"""Slicer passes by name, imported lazily so start-up stays fast (as in xDSL).

Adding a pass: one file in this folder, one line here, one lit test named
after the pass (`test/Transforms/<pass-name>.mlir`).
"""

from __future__ import annotations

import importlib

from .base import ModulePass

_PASSES: dict[str, str] = {
    "slicer-verify": "slicer.passes.verify:SlicerVerify",
    "slicer-lower-to-loops": "slicer.passes.lower_to_loops:SlicerLowerToLoops",
    "slicer-propagate": "slicer.passes.propagate:SlicerPropagate",
    "slicer-apply-tactics": "slicer.passes.apply_tactics:SlicerApplyTactics",
    "slicer-partition": "slicer.passes.partition:SlicerPartition",
}


def pass_names() -> list[str]:
    return sorted(_PASSES)


def is_slicer_pass(name: str) -> bool:
    return name in _PASSES


def get_pass(name: str) -> type[ModulePass]:
    """The pass class registered under `name`; KeyError if there is none."""
    module_name, class_name = _PASSES[name].split(":")
    return getattr(importlib.import_module(module_name), class_name)
