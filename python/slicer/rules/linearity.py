"""Is an elementwise linalg op linear in some of its inputs? (may partial sums flow through it unreduced?)

A partial sum is a value every device holds a term of: the value is the sum of the terms. An op `f` may take
the terms and give terms of its result, with no reduction before it, exactly when `f` is linear in the partial
inputs jointly: f(sum_d a_d, sum_d b_d, c) = sum_d f(a_d, b_d, c), c being the inputs every device holds whole.
For a `linalg.generic` with parallel loops only, that is when its body yields, for its one result, a linear
combination of the partial inputs' elements:
    lin := partial input | lin + lin | lin - lin | -lin | lin * free | free * lin | lin / free
where `free` reads neither a partial input nor the output (a constant, another input, a captured scalar). A
constant term (`lin + 1`) or a product of two partial inputs is not linear. The sum of the input gradients of
a layer whose weights are split (Megatron: dq Wq + dk Wk + dv Wv) is such an op: its terms add up per device
and one all_reduce of the sum replaces one per term (`slicer.spmd.partitioner`).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith

from slicer.core.linalg_facts import PARALLEL, has_operand_segments, input_count, is_linalg_op, iterator_kinds

_ADD = (arith.AddFOp.OPERATION_NAME, arith.SubFOp.OPERATION_NAME)
_NEG = arith.NegFOp.OPERATION_NAME
_MUL = arith.MulFOp.OPERATION_NAME
_DIV = arith.DivFOp.OPERATION_NAME


def linear_in(op: ir.Operation, inputs: set[int] | frozenset[int]) -> str | None:
    """None if `op`'s one result is linear in its inputs numbered `inputs` jointly (see the module docstring),
    else why not. `op` is a linalg op with parallel loops only and one result (a `linalg.generic`; a named op
    answers through its generic body when it has one)."""
    op = op.operation
    if not is_linalg_op(op):
        return f"'{op.name}' is not a linalg op"
    if len(op.results) != 1:
        return f"'{op.name}' has {len(op.results)} results (one is asked)"
    kinds = iterator_kinds(op)
    if not kinds or any(k != PARALLEL for k in kinds):
        return f"'{op.name}' is not elementwise (its loops are {kinds or 'unknown'})"
    if not has_operand_segments(op) or not op.regions or not op.regions[0].blocks:
        return f"'{op.name}' has no body with inputs and outputs"
    body = op.regions[0].blocks[0]
    count = input_count(op)
    if not inputs or any(not 0 <= i < count for i in inputs):
        return f"inputs {sorted(inputs)} are not inputs of '{op.name}' ({count} inputs)"
    partial = {body.arguments[i] for i in inputs}
    out = body.arguments[count]
    ops = body.operations
    yielded = ops[len(ops) - 1].operands[0]
    why = _linear(yielded, partial, out, body)
    return None if why is None else f"'{op.name}' yields {why}"


def _linear(value: ir.Value, partial: set, out: ir.Value, body: ir.Block) -> str | None:
    """None if `value` is a linear combination of `partial` (block arguments) with free coefficients."""
    if value in partial:
        return None
    if value == out:
        return "its output's old value"
    owner = value.owner
    if isinstance(owner, ir.Block) or owner.operation.block != body or _free(value, partial, out, body):
        return "a value that reads no partial input (a constant term)"
    op = owner.operation
    operands = list(op.operands)
    if op.name in _ADD:
        return _linear(operands[0], partial, out, body) or _linear(operands[1], partial, out, body)
    if op.name == _NEG:
        return _linear(operands[0], partial, out, body)
    if op.name == _MUL:
        first_free = _free(operands[0], partial, out, body)
        linear_side, free_side = (operands[1], operands[0]) if first_free else (operands[0], operands[1])
        if not _free(free_side, partial, out, body):
            return "a product of two values that read partial inputs"
        return _linear(linear_side, partial, out, body)
    if op.name == _DIV:
        if not _free(operands[1], partial, out, body):
            return "a division by a value that reads a partial input"
        return _linear(operands[0], partial, out, body)
    return f"'{op.name}' of a partial input, which is not linear"


def _free(value: ir.Value, partial: set, out: ir.Value, body: ir.Block) -> bool:
    """Does `value` read neither a partial input nor the output (within `body`)?"""
    stack, seen = [value], set()
    while stack:
        current = stack.pop()
        if current in partial or current == out:
            return False
        owner = current.owner
        if isinstance(owner, ir.Block) or owner.operation.block != body:
            continue  # another input, or captured from outside the body
        op = owner.operation
        key = hash(op)  # nothing is rewritten during the walk: a stable key
        if key in seen:
            continue
        seen.add(key)
        stack.extend(op.operands)
    return True


__all__ = ["linear_in"]
