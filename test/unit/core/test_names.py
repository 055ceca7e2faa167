"""Every IR name has one home (slicer.core.names): no other module of the package spells one as a string.

A renamed attribute then breaks nothing silently: a second copy of `"slicer.dist"` somewhere else would keep
the old spelling. Docstrings and comments may mention names; code may not.
"""

import ast
import os
from pathlib import Path

import slicer
from slicer.core import names

PACKAGE = Path(slicer.__file__).parent
HOME = PACKAGE / "core" / "names.py"
IR_NAMES = {value for key, value in vars(names).items()
            if key.isupper() and isinstance(value, str) and value != names.DIALECT_PREFIX}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    # attribute docstrings: a string expression statement right after an assignment
    for node in ast.walk(tree):
        for field in ("body", "orelse"):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list):
                for stmt in stmts:
                    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                        found.add(id(stmt.value))
    return found


def package_files() -> list[Path]:
    """Every module of the package, the linked folders (dialect/, lowering/, runtime/) included."""
    return sorted(Path(root) / name for root, _, files in os.walk(PACKAGE, followlinks=True)
                  for name in files if name.endswith(".py"))


def test_ir_names_are_spelled_only_in_their_home():
    assert {"slicer.dist", "slicer.loop", "slicer.conflict", "shard.all_gather"} <= IR_NAMES
    offenders = []
    files = package_files()
    assert any(p.parent.name == "runtime" for p in files) and any(p.parent.name == "dialect" for p in files)
    for path in files:
        if path.resolve() == HOME.resolve():
            continue
        tree = ast.parse(path.read_text())
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
                if node.value in IR_NAMES:
                    offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {node.value!r}")
    assert not offenders, "IR names spelled outside slicer/core/names.py:\n" + "\n".join(offenders)
