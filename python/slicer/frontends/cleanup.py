"""Import-time cleanup: the shapes programs from frameworks come in, made partitionable.

torch-mlir's linalg is correct but written for a single device: named ops next to explicit transposes,
keepdim reductions into `[B, S, 1]` tensors, softmax's max with an unused argmax result, and a fused QKV
projection cut into its pieces with `tensor.extract_slice`. Propagation can push a tiling through all of it
only once the program says which dims are which. The cleanup, upstream passes wherever they exist:

1. `linalg-generalize-named-ops`: every linalg op as a `linalg.generic` (transposes become indexing maps);
   `linalg-fold-unit-extent-dims`: keepdim unit dims dropped (a `(d0, d1, 0)` map blocks the reshape fusion
   below); `canonicalize`.
2. `split_into_pieces` (`pieces.py`; upstream has no pass for it): `extract_slice`s that cut one dim of a
   tensor into aligned pieces of equal size (`qkv[..., 16:32]` of a 48-wide dim) take a piece of an
   `expand_shape` of that dim instead (`[.., 48] -> [.., 3, 16]`, piece `[.., 1, ..]`, rank-reducing). The
   piece's dims are then dims of the tensor, so tiling the heads of Q tiles dim 16 of the expanded QKV
   projection. Slices of slices are pieces of pieces.
3. `linalg-fuse-elementwise-ops`: elementwise chains fused, unused results (softmax's argmax) erased, and the
   `expand_shape`s above propagated into their producers by expanding their loops (so the QKV weight is read
   as `[3, 16, D]`); `canonicalize`, `cse`.
4. `reshape_per_use` (`pieces.py`): fusion folds a reshape into its consumers only when it has one use, so a
   `[B, S, D] -> [B * S, D]` collapse read twice (the backward of a linear layer: the weight's gradient and
   the bias's; the targets of a loss) stays, and S, the minor dim of its group, cannot be tiled through it
   (sequence parallelism would gather the loss's logits). Each use gets its own copy (and the expand_shape of
   a fill read elsewhere too its own fill) and step 3 runs again, until no further reshape folds.

Before all of it, `drop_reciprocal_asserts`: torch-mlir guards every float reciprocal (BatchNorm's
`1 / sqrt(var + eps)`) with `cf.assert %x != 0, "unimplemented: tensor with zero element"`. torch has no such
check (its reciprocal of 0 is inf, which the division computes anyway), and the assert is a side effect that
elementwise fusion cannot erase: it stays behind as a result-less `linalg.generic` per consumer, reading the conv
output, which propagation leaves replicated and partitioning gathers (3 all_gathers in a small CNN under data
parallelism). Dropping the asserts keeps torch's semantics and leaves no such op.

Each step ends with the module verified. The input is a valid module (torch-mlir's), so a step that fails or
leaves an invalid one is a bug in Slicer: an `InternalError` naming the step, the op and the model's Python
line (and `cleanup=False`, which imports without the cleanup), never a raw `MLIRError`.

Fences. Elementwise fusion fuses a producer into its consumer when the consumer is its only user, which merges
a chain of adds `a1 = g0 + g1; a2 = a1 + g2; ...` into one op reading every `g` at the end of the chain: where
the chain is meant to be computed step by step (gradient accumulation, `accumulation.py`: each micro-batch's
gradient added as soon as it exists, so that it dies), the fused op would keep all of them live. A traced
function returns such values as extra trailing results, the "fences" (a second user, so they stay separate ops);
`clean_up(module, fences=n)` drops its last n results once the fusion ran.

Elementwise producers fused into a contraction are recomputed per output element of the contraction
(layer norm inside the QKV matmul): the same program, partitionable as one op.
"""

from __future__ import annotations

import re

from mlir import ir
from mlir.dialects import cf, tensor
from mlir.dialects import func as func_d

from slicer.core.errors import InternalError
from slicer.core.functions import entry_function, function_type
from slicer.core.names import FUNCTION_TYPE_ATTR
from slicer.core.pipeline import run_pipeline
from slicer.core.source_lines import source_line
from slicer.dialect import walk_ops

from .pieces import concat_as_stack, reshape_per_use, shared_reshapes, split_into_pieces

BEFORE_SPLITS = "func.func(linalg-generalize-named-ops,linalg-fold-unit-extent-dims,canonicalize)"
AFTER_SPLITS = "func.func(linalg-fuse-elementwise-ops,canonicalize,cse)"


def clean_up(module: ir.Operation, *, entry: str | None = None, fences: int = 0) -> None:
    """Run the import-time cleanup on `module` (in place, in its context); then drop the last `fences` results
    of its function `entry` (see "Fences" in the module docstring)."""
    checked_step(module, "drop_reciprocal_asserts", drop_reciprocal_asserts)
    checked_step(module, BEFORE_SPLITS, lambda m: run_pipeline(m, BEFORE_SPLITS))
    checked_step(module, "split_into_pieces", split_into_pieces)
    checked_step(module, "concat_as_stack", concat_as_stack)
    checked_step(module, AFTER_SPLITS, lambda m: run_pipeline(m, AFTER_SPLITS))
    state = _reshape_state(module)
    for _ in range(MAX_RESHAPE_ROUNDS):  # each round folds reshapes into consumers whose results may be shared
        if not state[0]:
            break
        checked_step(module, "reshape_per_use", reshape_per_use)
        checked_step(module, AFTER_SPLITS, lambda m: run_pipeline(m, AFTER_SPLITS))
        state, before = _reshape_state(module), state
        if state == before:
            break  # the copies were merged back by cse: their consumers cannot expand
    if fences:
        checked_step(module, "drop_fences", lambda m: drop_last_results(entry_function(m, entry), fences))


MAX_RESHAPE_ROUNDS = 8
"""A bound on the rounds of `reshape_per_use` and fusion (a reshape folds at most once per round)."""


def _reshape_state(module: ir.Operation) -> tuple[int, int]:
    """(reshapes `reshape_per_use` would copy, reshapes in all): no change means fusion folded none."""
    return shared_reshapes(module), sum(
        1 for name in (tensor.CollapseShapeOp.OPERATION_NAME, tensor.ExpandShapeOp.OPERATION_NAME)
        for _ in walk_ops(module, name))


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
