"""The package as the house-keeping tests read it: every module file (the linked dialect/, lowering/ and
runtime/ folders included) parsed once, with the string constants that are docstrings set apart."""

from __future__ import annotations

import ast
import os
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "python" / "slicer"
"""The checkout's own package (not whichever `slicer` is first on the path)."""


def package_files() -> list[Path]:
    """Every module of the package, the linked folders (dialect/, lowering/, runtime/) included."""
    return sorted(Path(root) / name for root, _, files in os.walk(PACKAGE, followlinks=True)
                  for name in files if name.endswith(".py"))


@cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def relative(path: Path) -> str:
    return str(path.relative_to(PACKAGE))


def docstrings(tree: ast.AST) -> set[int]:
    """`id`s of the string constants that are docstrings: a module's, class's or function's first statement,
    or a string expression statement anywhere (an attribute docstring after an assignment)."""
    found = set()
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list):
                for stmt in stmts:
                    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                        found.add(id(stmt.value))
    return found


def string_literals(tree: ast.AST):
    """(node, value) for every string constant of `tree` that is not a docstring (f-string parts included)."""
    skip = docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            yield node, node.value
