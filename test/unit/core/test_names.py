"""Every IR name has one home (slicer.core.names): no other module of the package spells one as a string.

A renamed attribute then breaks nothing silently: a second copy of `"slicer.dist"` somewhere else would keep
the old spelling. Upstream op names come from the bindings (`linalg.GenericOp.OPERATION_NAME`), attribute
names from names.py. Docstrings and comments may mention names; code may not. Pass-pipeline text such as
`"func.func(canonicalize)"` is not an IR name (it does not match `IR_NAME`), and Python module names
(`"slicer.runtime.job"` after `-m`, a logger's name) are told apart by where they stand.
"""

import ast
import re

from package_tree import PACKAGE, package_files, parsed, relative, string_literals

from slicer.core import names

HOME = PACKAGE / "core" / "names.py"
GENERIC = {"value", "dim", "grid", "shape", "sharding", "axes", "reduction", "mesh", "action"}
"""Attribute names that are also ordinary words (a dict key, a keyword): caught where they key an op's
attributes (`test_attribute_keys_are_never_literals`), not everywhere."""
IR_NAMES = {value for key, value in vars(names).items()
            if key.isupper() and isinstance(value, str) and value != names.DIALECT_PREFIX and value not in GENERIC}

IR_NAME = re.compile(r"^(builtin|func|arith|math|linalg|tensor|memref|vector|scf|cf|llvm|shard|slicer|tosa|"
                     r"bufferization|transform|affine|index|gpu|ml_program|torch)\.[a-z_][a-z0-9_.]*$")
"""A dialect-qualified op or attribute name (`linalg.generic`, `slicer.vectorize_tag`, `llvm.emit_c_interface`)."""

UPSTREAM_ATTRIBUTES = {
    "indexing_maps", "iterator_types", "sym_name", "sym_visibility", "function_type", "operandSegmentSizes",
    "resultSegmentSizes", "arg_attrs", "res_attrs", "static_sizes", "static_offsets", "static_strides",
    "static_output_shape", "static_low", "static_high", "reassociation", "grid_axes", "split_axis",
    "gather_axis", "scatter_axis", "concat_axis", "slice_axis",
}
"""Upstream attribute names the package reads or writes (collected from `op.attributes[...]` in the package):
distinctive enough to be caught in any string literal."""

MODULE_CALLS = {"getLogger", "import_module", "__import__", "find_spec", "run_module"}
FILE_SUFFIXES = (".mlir", ".py", ".json", ".npy", ".npz", ".so", ".txt")


def _module_or_file_names(tree: ast.AST) -> set[int]:
    """`id`s of the string constants that name a Python module, object or file: a logger's or imported
    module's name, the element after `"-m"` in an argument list, a file name (`slicer.irdl.mlir`), the names
    of `__all__`."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in MODULE_CALLS:
                found.update(id(a) for a in node.args if isinstance(a, ast.Constant))
        if isinstance(node, (ast.List, ast.Tuple)):
            for before, after in zip(node.elts, node.elts[1:]):
                if isinstance(before, ast.Constant) and before.value == "-m" and isinstance(after, ast.Constant):
                    found.add(id(after))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.endswith(FILE_SUFFIXES):
            found.add(id(node))
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            found.update(id(e) for e in ast.walk(node.value) if isinstance(e, ast.Constant))
    return found


def _offenders(check) -> list[str]:
    found = []
    for path in package_files():
        if path.resolve() == HOME.resolve():
            continue
        tree = parsed(path)
        for node, value in check(tree):
            found.append(f"{relative(path)}:{node.lineno}: {value!r}")
    return found


def test_the_walk_sees_the_linked_folders():
    files = package_files()
    for folder in ("runtime", "dialect", "lowering"):
        assert any(p.parent.name == folder for p in files), folder


def test_ir_names_are_spelled_only_in_their_home():
    assert {"slicer.dist", "slicer.loop", "slicer.conflict", "shard.all_gather", "sym_name"} <= IR_NAMES
    def spelled(tree):
        python_names = _module_or_file_names(tree)
        return ((n, v) for n, v in string_literals(tree) if v in IR_NAMES and id(n) not in python_names)

    offenders = _offenders(spelled)
    assert not offenders, "IR names of slicer/core/names.py spelled elsewhere:\n" + "\n".join(offenders)


def _ir_like(tree):
    modules = _module_or_file_names(tree)
    for node, value in string_literals(tree):
        if id(node) in modules:
            continue
        if IR_NAME.match(value) or value in UPSTREAM_ATTRIBUTES:
            yield node, value


def test_no_ir_name_is_a_string_literal_outside_names():
    """Any dialect-qualified name or upstream attribute name, whether names.py has it or not."""
    offenders = _offenders(_ir_like)
    assert not offenders, ("IR names spelled as string literals (use `<Op>.OPERATION_NAME` from the bindings or "
                           "a constant of slicer/core/names.py):\n" + "\n".join(offenders))


def test_the_ir_name_check_catches_what_it_should_and_not_module_names():
    source = ('import logging, sys\nlog = logging.getLogger("slicer.kernels")\n'
              'argv = [sys.executable, "-m", "slicer.runtime.job"]\nPATH = "slicer.irdl.mlir"\n'
              'PIPE = "func.func(canonicalize)"\nA = "linalg.generic"\nB = "slicer.vectorize_tag"\n'
              'C = op.attributes["indexing_maps"]\n')
    assert [v for _, v in _ir_like(ast.parse(source))] == ["linalg.generic", "slicer.vectorize_tag", "indexing_maps"]


def _attribute_keys(tree):
    """String literals that key an op's attributes: `x.attributes["k"]`, `"k" in x.attributes`,
    `x.attributes.get("k")`, and the keys of a dict given as `attributes=`."""
    def is_attributes(node):
        return isinstance(node, ast.Attribute) and node.attr == "attributes"

    for node in ast.walk(tree):
        keys = []
        if isinstance(node, ast.Subscript) and is_attributes(node.value):
            keys = [node.slice]
        elif isinstance(node, ast.Compare) and any(is_attributes(c) for c in node.comparators):
            keys = [node.left]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and is_attributes(node.func.value):
            keys = node.args[:1]
        elif isinstance(node, ast.Call):
            keys = [k for kw in node.keywords if kw.arg == "attributes" and isinstance(kw.value, ast.Dict)
                    for k in kw.value.keys]
        for key in keys:
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                yield key, key.value


def test_attribute_keys_are_never_literals():
    offenders = _offenders(_attribute_keys)
    assert not offenders, ("op attribute names spelled as string literals (add a constant to "
                           "slicer/core/names.py):\n" + "\n".join(offenders))
