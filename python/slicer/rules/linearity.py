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
from slicer.core.names import ITERATOR_TYPES_ATTR

_ADD = (arith.AddFOp.OPERATION_NAME, arith.SubFOp.OPERATION_NAME)
_NEG = arith.NegFOp.OPERATION_NAME
_MUL = arith.MulFOp.OPERATION_NAME
_DIV = arith.DivFOp.OPERATION_NAME


def linear_in(op: ir.Operation, inputs: set[int] | frozenset[int]) -> str | None:
    """None if `op`'s one result is linear in its inputs numbered `inputs` jointly (see the module docstring),
    else why not. `op` is a linalg op with parallel loops only and one result (a `linalg.generic`; a named op
    answers through its generic body when it has one)."""
    body, why = _elementwise_body(op, inputs)
    if why is not None:
        return why
    ops = body.operations
    return linear_at(op, ops[len(ops) - 1].operands[0], inputs)


def linear_at(op: ir.Operation, value: ir.Value, inputs: set[int] | frozenset[int]) -> str | None:
    """None if `value`, a value of `op`'s body (an elementwise linalg op, as `linear_in` asks), is linear in the
    inputs numbered `inputs` jointly, else why not."""
    body, why = _elementwise_body(op, inputs)
    if why is not None:
        return why
    count = input_count(op)
    why = _linear(value, {body.arguments[i] for i in inputs}, body.arguments[count], body)
    return None if why is None else f"'{op.operation.name}' yields {why}"


def constant_term_inputs(op: ir.Operation, value: ir.Value, inputs: set[int] | frozenset[int]) -> frozenset[int] | None:
    """The other inputs of `op` that the constant terms of `value` (a value of its body, linear in `inputs` up to
    terms that read none of them: `c` in `p + c`, `c * k` in `(p + c * k) / s`) read; None when `value` is not
    such a sum, or a constant term reads no input (a literal: no device can hold it alone). Taken as partial sums
    too (held by one device, zeros on the others), those inputs make `value` linear -- if they are read nowhere
    else in it (`linear_at` says)."""
    body, why = _elementwise_body(op, inputs)
    if why is not None:
        return None
    count = input_count(op)
    found: set = set()
    if not _constant_terms(value, {body.arguments[i] for i in inputs}, body.arguments[count], body, found):
        return None
    arguments = list(body.arguments)[:count]
    return frozenset(i for i, argument in enumerate(arguments) if argument in found)


def _elementwise_body(op: ir.Operation, inputs) -> tuple[ir.Block | None, str | None]:
    """(the body of `op`, None) when `op` is an elementwise linalg op with one result and `inputs` are inputs of
    it, else (None, why not)."""
    op = op.operation
    if not is_linalg_op(op):
        return None, f"'{op.name}' is not a linalg op"
    if len(op.results) != 1:
        return None, f"'{op.name}' has {len(op.results)} results (one is asked)"
    kinds = iterator_kinds(op)
    if ITERATOR_TYPES_ATTR not in op.attributes or any(k != PARALLEL for k in kinds):
        # (a rank-0 generic has no loops: elementwise; a named op carries no iterator types)
        return None, f"'{op.name}' is not elementwise (its loops are {kinds or 'unknown'})"
    if not has_operand_segments(op) or not op.regions or not op.regions[0].blocks:
        return None, f"'{op.name}' has no body with inputs and outputs"
    count = input_count(op)
    if not inputs or any(not 0 <= i < count for i in inputs):
        return None, f"inputs {sorted(inputs)} are not inputs of '{op.name}' ({count} inputs)"
    return op.regions[0].blocks[0], None


def _constant_terms(value: ir.Value, partial: set, out: ir.Value, body: ir.Block, found: set) -> bool:
    """Is `value` linear in `partial` up to constant terms that read inputs? (their block arguments go to
    `found`)."""
    if value in partial:
        return True
    if value == out:
        return False
    owner = value.owner
    if isinstance(owner, ir.Block) or owner.operation.block != body or _free(value, partial, out, body):
        read = _arguments_read(value, body)
        found.update(read)
        return bool(read)
    op = owner.operation
    operands = list(op.operands)
    if op.name in _ADD:
        return (_constant_terms(operands[0], partial, out, body, found)
                and _constant_terms(operands[1], partial, out, body, found))
    if op.name == _NEG:
        return _constant_terms(operands[0], partial, out, body, found)
    if op.name in (_MUL, _DIV):
        linear_side, free_side = operands[0], operands[1]
        if op.name == _MUL and _free(linear_side, partial, out, body):
            linear_side, free_side = free_side, linear_side
        return _free(free_side, partial, out, body) and _constant_terms(linear_side, partial, out, body, found)
    return False


def _arguments_read(value: ir.Value, body: ir.Block) -> set:
    """The block arguments of `body` that `value` reads (through ops of `body`)."""
    stack, seen, found = [value], set(), set()
    while stack:
        current = stack.pop()
        owner = current.owner
        if isinstance(owner, ir.Block):
            if owner == body:
                found.add(current)
            continue
        op = owner.operation
        if op.block != body or hash(op) in seen:
            continue
        seen.add(hash(op))
        stack.extend(op.operands)
    return found


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


__all__ = ["constant_term_inputs", "linear_at", "linear_in"]
