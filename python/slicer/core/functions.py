"""Functions of a module: the one rule for choosing the function a request refers to (its "entry"), and the
one rule for which functions are a module's kernels (its public ones).

Every stage that picks a function (tactics, propagation, partitioning, the JIT, the kernel graph, the AOT
kernels) uses `entry_function`: the function named by `entry`, else the module's only function with a body,
else its only public one; anything else is an `EntryError` that lists the functions and says to name one.
Every stage that compiles all of a module's kernels (the AOT libraries, splitting a module into kernels)
uses `public_functions`.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import func as func_d

from .errors import EntryError
from .names import ARG_NAME_ATTR
from .operations import as_op


def _view(func) -> func_d.FuncOp:
    return as_op(func).opview


def function_name(func) -> str:
    return ir.StringAttr(_view(func).sym_name).value


def function_type(func) -> ir.FunctionType:
    return ir.FunctionType(ir.TypeAttr(_view(func).function_type).value)


def is_public(func) -> bool:
    visibility = _view(func).sym_visibility
    return visibility is None or ir.StringAttr(visibility).value == "public"


def defined_functions(module) -> list[ir.Operation]:
    """The `func.func`s with a body directly in `module`, in order."""
    return [as_op(op) for op in as_op(module).regions[0].blocks[0].operations
            if as_op(op).name == func_d.FuncOp.OPERATION_NAME and len(as_op(op).regions[0].blocks)]


def public_functions(module) -> list[ir.Operation]:
    """The public `func.func`s with a body directly in `module`, in order: the module's kernels."""
    return [func for func in defined_functions(module) if is_public(func)]


def entry_function(module, entry: str | None = None) -> ir.Operation:
    """The function `entry` (a name, with or without `@`) of `module`, or its single (public) function."""
    functions = defined_functions(module)
    names = ", ".join("@" + function_name(f) for f in functions) or "none"
    if entry:
        wanted = entry.lstrip("@")
        for func in functions:
            if function_name(func) == wanted:
                return func
        raise EntryError(f"the module has no function @{wanted} (functions: {names})")
    if len(functions) == 1:
        return functions[0]
    public = [f for f in functions if is_public(f)]
    if len(public) == 1:
        return public[0]
    raise EntryError(f"the module has {len(functions)} functions ({names}) and {len(public)} public ones; name the "
                     "one you mean (entry=..., or --entry)")


def value_names(func, kind: str = "arg") -> list[str | None]:
    """The names (`slicer.name` attribute) of the arguments (`kind="arg"`) or results (`"result"`) of `func`, by
    position (None where a value has none). Imported programs name every argument (`slicer.from_torch`:
    the model's inputs, then its parameters and buffers by their dotted names)."""
    fn_type = function_type(func)
    count = len(fn_type.inputs if kind == "arg" else fn_type.results)
    view = _view(func)
    attrs = view.arg_attrs if kind == "arg" else view.res_attrs
    if attrs is None:
        return [None] * count
    names: list[str | None] = []
    for entry in ir.ArrayAttr(attrs):
        entry = ir.DictAttr(entry)
        names.append(ir.StringAttr(entry[ARG_NAME_ATTR]).value
                     if ARG_NAME_ATTR in entry and isinstance(entry[ARG_NAME_ATTR], ir.StringAttr) else None)
    return names + [None] * (count - len(names))
