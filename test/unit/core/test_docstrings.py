"""Module docstrings say what the module does and why in a few lines; the detail goes to docs/ (the design
documents, or docs/module-notes.md for notes that belong to one module). Twenty lines hold a summary, the
reason and a short example; past that a docstring is a document, read less and kept up to date less."""

import ast

from package_tree import package_files, parsed, relative

MAX_MODULE_DOCSTRING_LINES = 20


def _long_module_docstring(tree: ast.Module) -> int | None:
    doc = ast.get_docstring(tree, clean=False)
    lines = len(doc.splitlines()) if doc is not None else 0
    return lines if lines > MAX_MODULE_DOCSTRING_LINES else None


def test_module_docstrings_are_short():
    offenders = [f"{relative(path)}: {lines} lines" for path in package_files()
                 if (lines := _long_module_docstring(parsed(path))) is not None]
    assert not offenders, (f"module docstrings over {MAX_MODULE_DOCSTRING_LINES} lines (keep what and why, move the "
                           "detail to docs/, e.g. docs/module-notes.md):\n" + "\n".join(offenders))


def test_the_check_counts_the_module_docstring_only():
    long_text = "\n".join(f"line {i}" for i in range(MAX_MODULE_DOCSTRING_LINES + 1))
    assert _long_module_docstring(ast.parse(f'"""{long_text}"""\n')) == MAX_MODULE_DOCSTRING_LINES + 1
    assert _long_module_docstring(ast.parse(f'"""Short."""\ndef f():\n    """{long_text}"""\n')) is None
    assert _long_module_docstring(ast.parse("x = 1\n")) is None
