"""The environment has one reader (slicer.core.environment) and one table (docs/environment.md).

No other module of the package touches `os.environ` (nor `os.getenv`, `os.putenv`, `os.unsetenv`) or spells a
`SLICER_*` name in code (docstrings may mention one), so every variable Slicer reads is in `VARIABLES`; the table
in docs/environment.md is that table, row for row; and a variable can only be read if it is in the table.
"""

import ast
import re
from pathlib import Path

import pytest
from package_tree import PACKAGE, package_files, parsed, relative, source, string_literals

from slicer.core import environment
from slicer.core.errors import InternalError

HOME = PACKAGE / "core" / "environment.py"
DOC = PACKAGE.parents[1] / "docs" / "environment.md"
ENVIRONMENT_CALLS = {"environ", "getenv", "putenv", "unsetenv", "environb", "getenvb"}


def _os_environment_uses(tree: ast.AST) -> list[int]:
    """Lines that reach the process environment through `os` (`os.environ`, `from os import environ`, ...)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ENVIRONMENT_CALLS and isinstance(node.value, ast.Name) \
                and node.value.id == "os":
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "os" and \
                any(alias.name in ENVIRONMENT_CALLS for alias in node.names):
            lines.append(node.lineno)
    return lines


def test_only_the_environment_module_reads_the_environment():
    found = []
    for path in package_files():
        if path.resolve() == HOME.resolve():
            continue
        tree = parsed(path)
        found += [f"{relative(path)}:{line}: os environment" for line in _os_environment_uses(tree)]
        found += [f"{relative(path)}:{node.lineno}: {text!r}" for node, text in string_literals(tree)
                  if "SLICER_" in text]
    assert not found, "read the environment through slicer.core.environment (a Variable in its table):\n" + \
        "\n".join(found)


def test_the_check_finds_a_reader():
    tree = ast.parse('import os\nfrom os import getenv\nx = os.environ.get("SLICER_X")\n"""doc: SLICER_Y"""\n')
    assert _os_environment_uses(tree) == [2, 3]
    assert [text for _, text in string_literals(tree) if "SLICER_" in text] == ["SLICER_X"]


def test_the_docs_table_is_the_modules_table():
    text = DOC.read_text()
    assert environment.table() in text, ("docs/environment.md's table differs from slicer.core.environment's: "
                                         "paste `python -m slicer.core.environment` over it")
    documented = re.findall(r"^\| `([A-Z0-9_]+)` \|", text, re.MULTILINE)
    assert documented == [v.name for v in environment.VARIABLES]


def test_every_variable_is_named_once_and_read_by_a_module_that_exists():
    names = [v.name for v in environment.VARIABLES]
    assert len(names) == len(set(names))
    assert all(v.slicer == v.name.startswith("SLICER_") for v in environment.VARIABLES)
    for variable in environment.VARIABLES:
        assert source(variable.reader).is_file(), variable


def test_a_variable_outside_the_table_cannot_be_read():
    with pytest.raises(InternalError, match="SLICER_UNLISTED"):
        environment.value(environment.Variable("SLICER_UNLISTED", "", "", "core/environment.py"))


def test_docs_that_mention_a_variable_link_the_table():
    docs = Path(DOC).parent
    for path in [*docs.glob("*.md"), docs.parent / "README.md"]:
        if path != DOC and "SLICER_" in path.read_text():
            assert "environment.md" in path.read_text(), f"{path.name} names a variable: link docs/environment.md"
