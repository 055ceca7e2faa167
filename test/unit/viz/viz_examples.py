"""Shared by the viz tests: compiled examples (cached per session: compiling takes about a second)."""

from functools import cache
from pathlib import Path

import slicer

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"


@cache
def _compile(example: str, mesh: tuple, tactics: str) -> slicer.Program:
    text = (EXAMPLES / f"{example}.mlir").read_text()
    return slicer.compile(text, mesh=slicer.Mesh(list(mesh)), tactics=slicer.parse_tactics(tactics),
                          source_name=f"examples/{example}.mlir")


def compile_example(example: str, mesh: dict, tactics: str) -> slicer.Program:
    return _compile(example, tuple(mesh.items()), tactics)
