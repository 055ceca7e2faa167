"""Sizes that read in one sitting: no module of the package (the mapped dialect/, lowering/, runtime/
included) over `MAX_FILE_LINES` lines, no function or method over `MAX_FUNCTION_LINES` (decorators and
docstring included). A longer one is split by concern, not by line count."""

import ast

from package_tree import package_files, parsed, relative

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80


def test_no_module_is_too_long():
    offenders = []
    for path in package_files():
        lines = len(path.read_text().splitlines())
        if lines > MAX_FILE_LINES:
            offenders.append(f"{relative(path)}: {lines} lines")
    assert not offenders, f"modules over {MAX_FILE_LINES} lines:\n" + "\n".join(offenders)


def _long_functions(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            length = node.end_lineno - start + 1
            if length > MAX_FUNCTION_LINES:
                yield node, length


def test_no_function_is_too_long():
    offenders = [f"{relative(path)}:{node.lineno}: {node.name} is {length} lines"
                 for path in package_files() for node, length in _long_functions(parsed(path))]
    assert not offenders, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(offenders)


def test_the_function_check_measures_nested_functions_and_methods():
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    source = f"class C:\n  def short(self):\n    pass\n  def long(self):\n{body}\n"
    assert [node.name for node, _ in _long_functions(ast.parse(source))] == ["long"]
