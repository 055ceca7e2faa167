"""Whether C holds zeros before a contraction, and the zero fill the contraction makes dead.

C starting at zero lets the first K block start from zero accumulators (no load of C), and the fill
is dropped when nothing reads the buffer in between, since the contraction then writes every element.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, func, linalg, memref

from slicer.core.linalg_facts import has_operand_segments, indexing_maps, input_count
from slicer.core.names import LINALG_PREFIX

# Users of a buffer that neither alias it nor hide a write through a view.
_VIEW_SAFE = (memref.LoadOp.OPERATION_NAME, memref.StoreOp.OPERATION_NAME, memref.CopyOp.OPERATION_NAME,
              memref.DeallocOp.OPERATION_NAME, func.ReturnOp.OPERATION_NAME, func.CallOp.OPERATION_NAME)


def zero_before(op: ir.Operation, buffer: ir.Value) -> tuple[bool, ir.Operation | None]:
    """Whether `buffer` holds zeros when `op` runs, and the zero fill that may be removed.

    True when a `linalg.fill` of 0.0 into `buffer` comes earlier in the same block and no op in
    between writes it (ops that only read it, like `memref.copy` from it or a linalg input, are fine).
    The fill is returned (removable) only if nothing in between reads the buffer either, since the
    contraction then writes every element first. Buffers with views anywhere are left alone.
    """
    for use in buffer.uses:
        owner = use.owner
        name = owner.name if hasattr(owner, "name") else owner.operation.name
        if not (name.startswith(LINALG_PREFIX) or name in _VIEW_SAFE):
            return False, None
    block = op.block
    ops = list(block.operations)
    index = next(i for i, o in enumerate(ops) if o.operation == op)
    readers = False
    for previous in reversed(ops[:index]):
        previous = previous.operation
        operands = list(previous.operands)
        if buffer not in operands:
            continue
        if operands[-1] == buffer and _is_zero(filled_value(previous)):
            return True, (None if readers else previous)
        if previous.name == memref.CopyOp.OPERATION_NAME and operands[1] == buffer and operands[0] != buffer:
            # A copy of a zero buffer (bufferization copies a shared zero fill per use).
            zero, _ = zero_before(previous, operands[0])
            return zero, (previous if zero and not readers else None)
        if previous.name == memref.CopyOp.OPERATION_NAME and operands[0] == buffer and operands[1] != buffer:
            readers = True
            continue
        if previous.name.startswith(LINALG_PREFIX) and has_operand_segments(previous):
            n_in = input_count(previous)
            if buffer not in operands[n_in:]:
                readers = True
                continue
        return False, None
    return False, None


def filled_value(op: ir.Operation) -> ir.Value | None:
    """The scalar `op` writes into every element of its one output, when it is a fill: linalg.fill; its
    generalized form, a generic yielding its one scalar input; or a generic of no input yielding a value from
    outside its body through a permutation (the frontend's fill). None for any other op."""
    if op.name == linalg.FillOp.OPERATION_NAME:
        return op.operands[0]
    if op.name != linalg.GenericOp.OPERATION_NAME or len(op.operands) not in (1, 2):
        return None
    scalar_input = len(op.operands) == 2
    if scalar_input and isinstance(op.operands[0].type, ir.ShapedType):
        return None
    if not scalar_input and not indexing_maps(op)[0].is_permutation:
        return None
    body = op.regions[0].blocks[0]
    ops = list(body.operations)
    if len(ops) != 1 or len(ops[0].operands) != 1:
        return None
    yielded = ops[0].operands[0]
    if scalar_input:
        return op.operands[0] if yielded == body.arguments[0] else None
    return None if yielded in list(body.arguments) else yielded  # the body is the yield: the rest is outside


def _is_zero(value: ir.Value | None) -> bool:
    if value is None:
        return False
    owner = None if isinstance(value, ir.BlockArgument) else value.owner
    if owner is None or owner.name != arith.ConstantOp.OPERATION_NAME:
        return False
    attr = owner.operation.opview.value
    try:
        return ir.FloatAttr(attr).value == 0.0
    except (ValueError, TypeError):
        return False

