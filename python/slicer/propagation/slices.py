"""Laws of slices: slices of slices reordered and composed (range algebra), a slice of a loop's result
replaced by the loop's body (deforestation) or commuted into the loop."""

from __future__ import annotations

from mlir import ir

from slicer.core.names import LOOP, RANGE_PRODUCT, SLICE
from slicer.core.operations import as_op, defining_op
from slicer.dialect import LoopOp, SliceOp, TileAction, loop, range_product, slice_, walk_ops, yield_

from .ir_utils import ancestors, enclosing_axes, is_unused, result_index
from .journal import Journal
from .loop_facts import inherit_provenance, may_take_body, take_body, tile_loop_of


def _range_loop(range_value: ir.Value) -> ir.Operation | None:
    """The loop whose range `range_value` is (through a `slicer.range_product`, its minor part's loop)."""
    if isinstance(range_value, ir.BlockArgument):
        owner = range_value.owner.owner
        return as_op(owner) if owner is not None and as_op(owner).name == LOOP else None
    producer = defining_op(range_value)
    return _range_loop(producer.operands[1]) if producer is not None and producer.name == RANGE_PRODUCT else None


def order_slices(op: ir.Operation, journal: Journal) -> bool:
    """slice(slice(t, d1, r1), d2, r2) == slice(slice(t, d2, r2), d1, r1) for d1 != d2: slices of different
    dims commute. Canonical order: the slice by the range of the outer loop first, so it can be hoisted out
    of the inner loop and the partitioner sees each device's block taken one loop at a time (a value tiled
    over x on one dim and y on another, used inside loops over x then y, then needs no gathering)."""
    if op.name != SLICE:
        return False
    second = SliceOp(op)
    first_op = defining_op(second.source)
    if first_op is None or first_op.name != SLICE:
        return False
    first = SliceOp(first_op)
    if first.dim == second.dim or len(list(first.result.uses)) != 1:
        return False
    outer, inner = _range_loop(second.range_value), _range_loop(first.range_value)
    if outer is None or inner is None or outer == inner or outer not in ancestors(inner):
        return False  # already outer-first (or unrelated loops)
    journal.rewriting(op)
    with ir.InsertionPoint(op), op.location:
        swapped = slice_(slice_(first.source, second.range_value, second.dim), first.range_value, first.dim)
    second.result.replace_all_uses_with(swapped)
    journal.erase(op)
    journal.erase(first_op)
    return True


def compose_slices(op: ir.Operation, journal: Journal) -> bool:
    """slice(slice(t, d, r1), d, r2) == slice(t, d, r1 x r2) over the product range (axes of r1 major)."""
    if op.name != SLICE:
        return False
    outer = SliceOp(op)
    inner_op = defining_op(outer.source)
    if inner_op is None or inner_op.name != SLICE:
        return False
    inner = SliceOp(inner_op)
    if inner.dim != outer.dim or inner.range is None or outer.range is None:
        return False
    if set(inner.range.axes) & set(outer.range.axes):
        return False
    if ir.RankedTensorType(inner.source.type).shape[inner.dim] % (inner.range.size * outer.range.size):
        return False  # padded blocks of padded blocks are not the padded blocks of the product range
    journal.rewriting(op)
    with ir.InsertionPoint(op), op.location:
        product = range_product(inner.range_value, outer.range_value)
        composed = slice_(inner.source, product, outer.dim)
    outer.result.replace_all_uses_with(composed)
    journal.erase(op)
    return True


def _inner_loop_axes(loop_op: LoopOp) -> set[str]:
    """The axes of the loops nested in `loop_op`'s body."""
    axes: set[str] = set()
    for inner in walk_ops(loop_op.operation, LOOP):
        if inner != loop_op.operation and LoopOp(inner).range is not None:
            axes.update(LoopOp(inner).range.axes)
    return axes


def deforest(op: ir.Operation, journal: Journal) -> bool:
    if op.name != SLICE:
        return False
    view = SliceOp(op)
    found = tile_loop_of(view.source)
    if found is None:
        return False
    producer, index = found
    if producer.action != TileAction(view.dim) or producer.range_arg.type != view.range_value.type:
        return False
    if not may_take_body(producer):
        return False  # a shared block: the slice stays and reads it
    busy = enclosing_axes(op)
    if busy and _inner_loop_axes(producer) & busy:
        return False  # the copied body would put a loop inside a loop over the same axis
    journal.rewriting(op)
    value = take_body(producer, view.range_value, journal, before=op)[index]
    view.result.replace_all_uses_with(value)
    journal.erase(op)
    if is_unused(producer.operation):
        journal.erase(producer.operation)  # its body was moved out
    return True


def commute_slice_into_loop(op: ir.Operation, journal: Journal) -> bool:
    """slice(loop_R(body), e, r) == loop_R(slice(body, e, r)) when R and r share no axis and,
    for a tile<d> loop, e != d (a slice of a sum is the sum of the slices)."""
    if op.name != SLICE:
        return False
    view = SliceOp(op)
    owner = defining_op(view.source)
    if owner is None or owner.name != LOOP:
        return False
    producer = LoopOp(owner)
    if producer.range is None or view.range is None or set(producer.range.axes) & set(view.range.axes):
        return False
    if isinstance(producer.action, TileAction) and producer.action.dim == view.dim:
        return False
    if not may_take_body(producer):
        return False  # the partitioner takes the block of the shared result
    busy = enclosing_axes(op)
    if busy and (set(producer.range.axes) | _inner_loop_axes(producer)) & busy:
        return False  # the new loop (or one copied in its body) would sit inside a loop over the same axes
    journal.rewriting(op)
    index = result_index(view.source)
    rule = f"slice over {', '.join(view.range.axes)} commuted into the loop over {', '.join(producer.range.axes)}"
    with ir.InsertionPoint(op), op.location:
        new_loop = loop([view.result.type], mesh=producer.mesh, action=producer.action, range=producer.range)
        inherit_provenance(new_loop.operation, producer, rule)
    with ir.InsertionPoint(new_loop.body), op.location:
        anchor = yield_([])  # placeholder terminator to move the body before
    yielded = take_body(producer, new_loop.range_arg, journal, before=anchor)[index]
    with ir.InsertionPoint(anchor), op.location:
        yield_([slice_(yielded, view.range_value, view.dim)])
    anchor.erase()
    view.result.replace_all_uses_with(new_loop.results[0])
    journal.erase(op)
    if is_unused(producer.operation):
        journal.erase(producer.operation)  # its body was moved into the new loop
    return True
