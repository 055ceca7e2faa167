"""The package as the house-keeping tests read it: every module file of the checkout's four source folders
(python/slicer/ and the top-level dialect/, lowering/ and runtime/, which pyproject.toml maps to
`slicer.dialect`, `slicer.lowering` and `slicer.runtime`) parsed once, with the string constants that are
docstrings set apart. Paths are named as in the package: `runtime/execution/executor.py`, `core/names.py`."""

from __future__ import annotations

import ast
import os
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PACKAGE = REPO / "python" / "slicer"
"""The checkout's own package root (not whichever `slicer` is first on the path)."""

MAPPED = {name: REPO / name for name in ("dialect", "lowering", "runtime")}
"""The subpackages whose sources live at the top of the checkout (pyproject.toml's `package-dir`)."""


def source(relative_path: str) -> Path:
    """The file or folder of the checkout behind a path named as in the package (`runtime/execution/executor.py`)."""
    head, _, rest = relative_path.partition("/")
    return MAPPED[head] / rest if head in MAPPED else PACKAGE / relative_path


def package_roots() -> list[Path]:
    """The folders the package is made of: python/slicer/ and the mapped top-level ones."""
    return [PACKAGE, *MAPPED.values()]


def package_files() -> list[Path]:
    """Every module of the package, the mapped folders (dialect/, lowering/, runtime/) included."""
    return sorted(Path(root) / name for top in package_roots() for root, _, files in os.walk(top)
                  for name in files if name.endswith(".py"))


def package_dirs() -> list[str]:
    """Every package of the project, dotted (`slicer`, `slicer.lowering.contract`, ...): folders with an
    `__init__.py` under the roots."""
    found = []
    for top in package_roots():
        prefix = "slicer" if top == PACKAGE else f"slicer.{top.name}"
        for root, dirs, files in os.walk(top):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            if "__init__.py" in files:
                inner = Path(root).relative_to(top)
                found.append(prefix if inner == Path(".") else f"{prefix}.{'.'.join(inner.parts)}")
    return sorted(found)


@cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def relative(path: Path) -> str:
    """`path` named as in the package: `runtime/execution/executor.py` for the checkout's
    runtime/execution/executor.py."""
    path = path.resolve()
    for name, top in MAPPED.items():
        if path.is_relative_to(top):
            return str(Path(name) / path.relative_to(top))
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
