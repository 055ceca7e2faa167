"""Import-time cleanup: the shapes programs from frameworks come in, made partitionable.

torch-mlir's linalg is correct but written for a single device: named ops next to explicit transposes,
keepdim reductions into `[B, S, 1]` tensors, softmax's max with an unused argmax result, and a fused QKV
projection cut into its pieces with `tensor.extract_slice`. Propagation can push a tiling through all of it
only once the program says which dims are which. The cleanup runs upstream passes wherever they exist; its
steps: docs/module-notes.md, `frontends/cleanup.py`.
"""

from __future__ import annotations

import re

from mlir import ir
from mlir.dialects import cf
from mlir.dialects import func as func_d

from slicer.core.errors import InternalError
from slicer.core.functions import entry_function, function_type
from slicer.core.names import FUNCTION_TYPE_ATTR
from slicer.core.pipeline import run_pipeline
from slicer.core.source_lines import source_line
from slicer.dialect import walk_ops

from .fills import fills_at_reshapes
from .lookups import split_lookups
from .pieces import concat_as_stack, split_into_pieces

BEFORE_SPLITS = "func.func(linalg-generalize-named-ops,linalg-fold-unit-extent-dims,canonicalize)"
AFTER_SPLITS = "func.func(linalg-fuse-elementwise-ops,canonicalize,cse)"
AFTER_FILLS = "func.func(cse,canonicalize)"


def clean_up(module: ir.Operation, *, entry: str | None = None, fences: int = 0) -> None:
    """Run the import-time cleanup on `module` (in place, in its context); then drop the last `fences` results
    of its function `entry` (see "Fences" in the module docstring)."""
    checked_step(module, "drop_reciprocal_asserts", drop_reciprocal_asserts)
    checked_step(module, BEFORE_SPLITS, lambda m: run_pipeline(m, BEFORE_SPLITS))
    checked_step(module, "split_into_pieces", split_into_pieces)
    checked_step(module, "concat_as_stack", concat_as_stack)
    checked_step(module, AFTER_SPLITS, lambda m: run_pipeline(m, AFTER_SPLITS))
    if checked_step(module, "split_lookups", split_lookups):
        checked_step(module, AFTER_FILLS, lambda m: run_pipeline(m, AFTER_FILLS))
    if checked_step(module, "fills_at_reshapes", fills_at_reshapes):
        checked_step(module, AFTER_FILLS, lambda m: run_pipeline(m, AFTER_FILLS))
    if fences:
        checked_step(module, "drop_fences", lambda m: drop_last_results(entry_function(m, entry), fences))


def drop_last_results(func: ir.Operation, count: int) -> None:
    """Make `func` (a `func.func` of one block) return all but its last `count` results; the values that only
    they used are left to the next dead-code elimination."""
    body = func.regions[0].blocks[0]
    returned = body.operations[len(body.operations) - 1]
    kept = list(returned.operands)[:len(returned.operands) - count]
    with ir.InsertionPoint(returned), returned.location:
        func_d.ReturnOp(kept)
    returned.erase()
    old = function_type(func)
    func.attributes[FUNCTION_TYPE_ATTR] = ir.TypeAttr.get(ir.FunctionType.get(old.inputs, old.results[:len(kept)]))


def checked_step(module: ir.Operation, name: str, step):
    """Run the cleanup step `step(module)` (`name` in messages) and verify the module after it: an MLIRError of
    either becomes an InternalError naming the op and its Python line (see the module docstring). Returns what
    the step returns."""
    try:
        found = step(module)
        module.verify()
    except ir.MLIRError as exc:
        raise InternalError(f"the import-time cleanup broke the program in step '{name}': "
                            f"{_first_diagnostic(exc)}. This is a bug in Slicer: please report it; "
                            "importing with cleanup=False skips the cleanup (the program may partition worse)"
                            ) from None
    return found


#: The op a diagnostic's note shows: `see current operation: %48 = "tensor.extract_slice"(%40) ...`.
_NOTED_OP = re.compile(r'see current operation: (?:[^=]*= )?"?([\w.]+)')


def _first_diagnostic(exc: ir.MLIRError) -> str:
    """`'op' at file.py:line: message` of `exc`'s first error (the op from its note, the user's line from its
    location), or the error's text when it has no diagnostics."""
    diagnostics = getattr(exc, "error_diagnostics", None) or []
    if not diagnostics:
        return str(exc).strip().splitlines()[-1]
    first = diagnostics[0]
    notes = " ".join(str(note.message) for note in first.notes)
    op = _NOTED_OP.search(notes)
    where = source_line(first.location) or str(first.location)
    named = f"'{op.group(1)}' " if op else ""
    return f"{named}at {where}: {first.message}"


#: The message of torch-mlir's check that a reciprocal's operand is not zero (see the module docstring).
RECIPROCAL_ASSERT = "unimplemented: tensor with zero element"


def drop_reciprocal_asserts(module: ir.Operation) -> int:
    """Erase torch-mlir's `cf.assert`s of `RECIPROCAL_ASSERT` (see the module docstring); returns how many."""
    found = [op for op in walk_ops(module, cf.AssertOp.OPERATION_NAME)
             if ir.StringAttr(op.opview.msg).value == RECIPROCAL_ASSERT]
    for op in found:
        op.erase()
    return len(found)


__all__ = ["AFTER_SPLITS", "BEFORE_SPLITS", "RECIPROCAL_ASSERT", "checked_step", "clean_up", "drop_last_results",
           "drop_reciprocal_asserts", "split_into_pieces"]
