"""Ops found in a parsed module stay valid only while the module is held: the MLIR Python bindings do not keep a
module alive for the ops taken out of it, and once the temporary module is collected a function taken from it
reads freed memory (another module's function, or a segfault: found by the fuzzer's training cases, in
`strategies._read_step`). The first test shows the hazard; the second keeps the package free of it."""

import ast
import gc

from mlir import ir
from package_tree import package_files, relative

from slicer.core.functions import entry_function, function_type
from slicer.dialect import make_context

F = "func.func @f(%a: tensor<4x8xf32>) -> tensor<4x8xf32> { return %a : tensor<4x8xf32> }"
G = "func.func @g(%a: tensor<16xi32>) -> tensor<16xi32> { return %a : tensor<16xi32> }"
OP_FINDERS = {"entry_function", "defined_functions", "public_functions"}
PARSERS = {"parse", "parse_source"}


def test_a_function_of_a_held_module_stays_valid():
    with make_context():
        module = ir.Module.parse(F)
        func = entry_function(module)
        gc.collect()
        others = [ir.Module.parse(G) for _ in range(20)]  # would reuse the memory of a collected module
        assert str(function_type(func)) == "(tensor<4x8xf32>) -> tensor<4x8xf32>"
        assert others


def test_no_op_is_taken_from_a_module_that_is_not_held():
    """No call like `entry_function(ir.Module.parse(text))`: the parsed module must be a variable."""
    found = []
    for path in package_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None))
                    in OP_FINDERS):
                continue
            for arg in node.args[:1]:
                if isinstance(arg, ast.Call) and getattr(arg.func, "id", getattr(arg.func, "attr", None)) in PARSERS:
                    found.append(f"{relative(path)}:{node.lineno}")
    assert not found, f"ops taken from a temporary module (hold the module in a variable): {found}"
