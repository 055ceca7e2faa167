"""The error catalogue is closed: every error the package raises is a `slicer.core.errors.SlicerError`
documented in docs/errors.md, and every class of the catalogue is documented and reachable.

A `raise` names its class (`raise MeshError(...)`), re-raises a caught error (bare `raise`, `raise exc`), or
raises what a factory of the same module builds (`raise self.fail(...)`, whose return annotation names a
catalogue class). Anything else (a `ValueError`, a private exception class) is an error a user cannot catch
by the documented classes.
"""

import ast
import re

from package_tree import PACKAGE, package_files, parsed, relative

import slicer
from slicer.core import errors

DOC = PACKAGE.parents[1] / "docs" / "errors.md"
CATALOGUE = {name: value for name, value in vars(errors).items()
             if isinstance(value, type) and issubclass(value, errors.SlicerError)}


def documented() -> set[str]:
    """The class names docs/errors.md's table lists (first column)."""
    return set(re.findall(r"^\| `(\w+)`", DOC.read_text(), flags=re.M))


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _factories(trees) -> dict[str, str]:
    """Function name -> the class its return annotation names, for every function of `trees` (a factory may be
    imported from another module; two functions of one name must agree)."""
    found: dict[str, str] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
                returns = ast.unparse(node.returns).strip("'\"")
                found[node.name] = returns if found.get(node.name, returns) == returns else "functions that disagree"
    return found


def _raised(tree: ast.AST, factories: dict[str, str]):
    """(line, class name or a description of what is wrong) for every `raise` that names what it raises."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Raise) or node.exc is None:
            continue
        exc = node.exc
        if isinstance(exc, ast.Call):
            name = _name(exc.func)
            if name is None:
                yield node.lineno, f"raise of {ast.unparse(exc)}"
            elif name[0].isupper():
                yield node.lineno, name
            else:  # a factory: its annotation says what it builds
                yield node.lineno, factories.get(name, f"raise {name}(...) of a function without a return annotation")
        else:
            name = _name(exc)
            if name is not None and name[0].isupper():
                yield node.lineno, name  # `raise SomeError` (the class itself)
            # else: a caught error raised again (`raise exc`, `raise failure`)


def test_every_raise_raises_a_documented_slicer_error():
    known = documented()
    offenders = []
    factories = _factories(parsed(path) for path in package_files())
    for path in package_files():
        for line, name in _raised(parsed(path), factories):
            if name not in CATALOGUE:
                offenders.append(f"{relative(path)}:{line}: {name} is not a slicer.core.errors.SlicerError")
            elif name not in known:
                offenders.append(f"{relative(path)}:{line}: {name} is not in docs/errors.md")
    assert not offenders, "raises outside the error catalogue:\n" + "\n".join(offenders)


def test_the_raise_check_tells_classes_factories_and_re_raises_apart():
    source = ("def fail(m) -> PassFailure: ...\ndef bad(m) -> ValueError: ...\n"
              "try:\n    raise MeshError('x')\nexcept MeshError as exc:\n    raise\n"
              "raise exc\nraise fail('m')\nraise bad('m')\nraise ValueError('v')\nraise KeyError\n")
    tree = ast.parse(source)
    assert sorted(name for _, name in _raised(tree, _factories([tree]))) == [
        "KeyError", "MeshError", "PassFailure", "ValueError", "ValueError"]


def test_every_error_class_is_documented_exported_or_internal():
    known = documented()
    assert not set(CATALOGUE) - known, f"classes missing from docs/errors.md: {sorted(set(CATALOGUE) - known)}"
    assert not known - set(CATALOGUE), ("docs/errors.md lists classes that do not exist: "
                                        f"{sorted(known - set(CATALOGUE))}")
    for name in CATALOGUE:
        assert name in errors.__all__, f"{name} is missing from slicer.core.errors.__all__"
        if name in errors.INTERNAL:
            assert name not in slicer.__all__, f"{name} is internal (errors.INTERNAL) but exported from slicer"
            assert re.search(rf"^\| `{name}`[^|]*\binternal\b", DOC.read_text(), flags=re.M), \
                f"docs/errors.md does not say that {name} is internal"
        else:
            assert name in slicer.__all__ and getattr(slicer, name) is CATALOGUE[name], \
                f"{name} is not exported from slicer (or listed in errors.INTERNAL)"


def test_no_exception_class_is_defined_outside_the_catalogue():
    """An exception class elsewhere is one a user cannot find in docs/errors.md."""
    home = (PACKAGE / "core" / "errors.py").resolve()
    offenders = []
    for path in package_files():
        if path.resolve() == home:
            continue
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.ClassDef) and any(re.search(r"(Error|Exception|Failure|Exceeded)$", _name(b) or "")
                                                       for b in node.bases):
                offenders.append(f"{relative(path)}:{node.lineno}: class {node.name}")
    assert not offenders, "exception classes outside slicer/core/errors.py:\n" + "\n".join(offenders)


def test_every_warning_class_is_documented_and_exported():
    """The warnings (`SlicerWarning` and its subclasses, docs/errors.md "Warnings") are listed as `warning` rows and
    exported from `slicer`; they are not errors."""
    warnings = {name for name, value in vars(errors).items()
                if isinstance(value, type) and issubclass(value, errors.SlicerWarning)}
    assert warnings >= {"SlicerWarning", "DegradedStrategy"}
    assert set(re.findall(r"^\| warning `(\w+)`", DOC.read_text(), flags=re.M)) == warnings
    for name in warnings:
        assert name in slicer.__all__ and not issubclass(getattr(errors, name), errors.SlicerError)
