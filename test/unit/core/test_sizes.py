"""Sizes that read in one sitting: no module of the package (the mapped dialect/, lowering/, runtime/
included) over `MAX_FILE_LINES` lines, no class over `MAX_CLASS_LINES`, no function or method over
`MAX_FUNCTION_LINES` (decorators and docstring included). A longer one is split by concern, not by line count."""

import ast

from package_tree import package_files, parsed, relative

MAX_FILE_LINES = 500
MAX_CLASS_LINES = 300
MAX_FUNCTION_LINES = 80


def test_no_module_is_too_long():
    offenders = []
    for path in package_files():
        lines = len(path.read_text().splitlines())
        if lines > MAX_FILE_LINES:
            offenders.append(f"{relative(path)}: {lines} lines")
    assert not offenders, f"modules over {MAX_FILE_LINES} lines:\n" + "\n".join(offenders)


def _long_definitions(tree: ast.AST, kinds: tuple[type, ...], limit: int):
    for node in ast.walk(tree):
        if isinstance(node, kinds):
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            length = node.end_lineno - start + 1
            if length > limit:
                yield node, length


def _long_functions(tree: ast.AST):
    return _long_definitions(tree, (ast.FunctionDef, ast.AsyncFunctionDef), MAX_FUNCTION_LINES)


def _long_classes(tree: ast.AST):
    return _long_definitions(tree, (ast.ClassDef,), MAX_CLASS_LINES)


def test_no_function_is_too_long():
    offenders = [f"{relative(path)}:{node.lineno}: {node.name} is {length} lines"
                 for path in package_files() for node, length in _long_functions(parsed(path))]
    assert not offenders, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(offenders)


def test_the_function_check_measures_nested_functions_and_methods():
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    source = f"class C:\n  def short(self):\n    pass\n  def long(self):\n{body}\n"
    assert [node.name for node, _ in _long_functions(ast.parse(source))] == ["long"]


def test_no_class_is_too_long():
    offenders = [f"{relative(path)}:{node.lineno}: {node.name} is {length} lines"
                 for path in package_files() for node, length in _long_classes(parsed(path))]
    assert not offenders, f"classes over {MAX_CLASS_LINES} lines (split by responsibility):\n" + "\n".join(offenders)


def test_the_class_check_measures_nested_classes_with_their_decorators():
    body = "\n".join(f"        x{i} = {i}" for i in range(MAX_CLASS_LINES))
    source = f"class Short:\n    pass\n\nclass Outer:\n    @decorator\n    class Long:\n{body}\n"
    assert [node.name for node, _ in _long_classes(ast.parse(source))] == ["Outer", "Long"]
