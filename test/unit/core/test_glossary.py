"""One word per idea (the glossary of docs/architecture.md), checked where a test can check it: on the names
of the package's classes, functions, parameters, attributes and variables (prose is left to review).

- No two classes share a name: a name in a traceback or a review says which class it is (the redistribution
  planner's `PlanSearch`, the automatic search's `TacticSearch`).
- A word with one meaning appears in names only where that meaning lives (`HOMES`): "layout" is the
  redistribution `Layout` (where every device's block lies), or upstream's word for a memref's or LLVM's data
  layout in `lowering/`; "sharding" is a distribution the input program requests (`#slicer.sharding`); "spec"
  is an array's shape and dtype (`lowering.kernel.ArraySpec`), or importlib's module spec. A new use elsewhere
  fails: give the idea its own word (a value's per-dim axes in `automatic/` are its *tiling*; the pictures of
  which device holds which block are *block pictures*), or add the module here with the reason.
"""

import ast
import re
from collections import defaultdict

from package_tree import package_files, parsed, relative

UPSTREAM_NAMES = {"tight_layout", "StridedLayoutAttr", "LLVMCreateTargetDataLayout", "LLVMSetModuleDataLayout",
                  "find_spec", "module_from_spec", "spec_from_file_location"}
"""Names other libraries chose (matplotlib, the MLIR bindings, LLVM's C API, importlib)."""

HOMES = {
    "layout": (re.compile(r"layout", re.IGNORECASE), {
        "redistribution/": "the `Layout` class and its users in the planner",
        "runtime/execution/blocks.py": "each rank's block, from the redistribution `Layout`",
        "runtime/simulation/simulator.py": "the simulator runs steps on the redistribution `Layout`",
        "viz/block_picture.py": "the picture draws the redistribution `Layout`",
        "lowering/": "a memref's layout and LLVM's data layout (upstream MLIR's and LLVM's word)",
    }),
    "sharding": (re.compile(r"sharding", re.IGNORECASE), {
        "core/names.py": "the IR names of `#slicer.sharding`",
        "dialect/": "the attribute, its views and its verifier",
        "tactics/": "tactics read from the shardings the program requests",
        "spmd/": "the partitioner gives each requested sharding's argument or result its type",
        "frontends/context_heads.py": "Ulysses requests attention's values tiled by heads, then by the sequence",
    }),
    "spec": (re.compile(r"(^|_)[sS]pecs?($|_)|Spec"), {
        "lowering/": "`ArraySpec`: the shape and dtype of a kernel's argument",
        "checking.py": "random inputs for a compiled function's `ArraySpec`s",
        "core/lazy.py": "importlib's module spec",
        "core/source_lines.py": "importlib's module spec",
        "runtime/jobs/rank.py": "importlib's module spec",
    }),
}
"""word -> (what matches it in a name, {module or folder: why the word means its glossary sense there})."""


def _names(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.lineno, node.name
        elif isinstance(node, ast.Name):
            yield node.lineno, node.id
        elif isinstance(node, ast.Attribute):
            yield node.lineno, node.attr
        elif isinstance(node, ast.arg):
            yield node.lineno, node.arg
        elif isinstance(node, ast.keyword) and node.arg:
            yield node.value.lineno, node.arg


def misplaced(module: str, tree: ast.AST, homes=HOMES):
    """(line, name, word) of each name in `tree` (of `module`) using a word outside the word's homes."""
    for line, name in _names(tree):
        if name in UPSTREAM_NAMES:
            continue
        for word, (pattern, places) in homes.items():
            if pattern.search(name) and not any(module == p or (p.endswith("/") and module.startswith(p))
                                                for p in places):
                yield line, name, word


def test_no_two_classes_share_a_name():
    places = defaultdict(list)
    for path in package_files():
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.ClassDef):
                places[node.name].append(f"{relative(path)}:{node.lineno}")
    shared = {name: where for name, where in places.items() if len(where) > 1}
    assert not shared, "classes sharing a name (give each its own):\n" + "\n".join(
        f"{name}: {', '.join(where)}" for name, where in sorted(shared.items()))


def test_words_with_one_meaning_stay_home():
    offenders = [f"{relative(path)}:{line}: '{name}' uses '{word}' outside its meaning's modules"
                 for path in package_files() for line, name, word in misplaced(relative(path), parsed(path))]
    assert not offenders, "one word per idea (docs/architecture.md, Glossary):\n" + "\n".join(offenders)


def test_the_check_finds_a_word_away_from_home():
    tree = ast.parse("class Layout: pass\ndef f(layouts, spec): return tight_layout(layouts)\n")
    assert {(name, word) for _, name, word in misplaced("automatic/cost_model.py", tree)} == {
        ("Layout", "layout"), ("layouts", "layout"), ("spec", "spec")}
    assert not list(misplaced("redistribution/layout.py", ast.parse("class Layout: pass\n")))
