"""A reduction reads a partial sum in the blocks another reader already asks for (`reduce_shared_blocks`).

A `sum` loop's result is a partial sum over the loop's axes A (each device holds a term); the partitioner
resolves it where it is read: an op reading it whole gets an all_reduce, a slice of it by a range over A gets a
reduce_scatter (each device the sum of its block). When both happen to one value -- ZeRO's optimizer update
reads each gradient's block (reduce_scatter) and gradient clipping's sum of squares reads it whole -- the value
crosses the network twice. If the whole reader is a reduction over the sliced dim, it can read the same blocks
instead: `op(v) = sum over r of op(slice(v, d, r))`, its result a partial sum over A, resolved by one all_reduce
of the (smaller) result where it is read whole; partial results added up stay partial (`slicer.rules.linear_in`
and `slicer.spmd.linear_split` in the partitioner), so the sums of squares of every gradient cost one scalar
all_reduce together.

The law makes the reader read `loop tile<d> over A (r -> slice(v, d, r))` -- the loop a tactic would make --
and the forward law (`blockwise.pull_op_into_loop`) then pulls it into a `sum` loop over A whose blocks are the
other reader's (the partitioner converts the value once per distributed type: the reduce_scatter is shared).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import func

from slicer.core.names import DIALECT_PREFIX, LINALG_PREFIX, LOOP, SLICE, YIELD
from slicer.core.operations import as_op, defining_op
from slicer.dialect import LoopOp, RangeType, SliceOp, SumAction, TileAction, loop, slice_, yield_
from slicer.rules import NoRule

from .blockwise import _indivisible
from .ir_utils import enclosing_axes, enclosing_loops, result_index
from .journal import Journal
from .loop_facts import inherit_provenance, outcome_kind, tile_loop_of, tile_outcome

RULE = "shared blocks: a reduction over dim {dim} reads the partial sum's blocks over {axes} (no further collective)"


def sum_loop_of(value: ir.Value) -> LoopOp | None:
    """The `sum` loop whose result `value` is (a partial sum over the loop's axes), else None."""
    owner = defining_op(value)
    if owner is None or owner.name != LOOP:
        return None
    view = LoopOp(owner)
    return view if isinstance(view.action, SumAction) else None


def sliced_by_range_of(value: ir.Value, producer: LoopOp) -> list[SliceOp]:
    """The slices of `value` by a range over exactly `producer`'s range (each device's sum of its block: a
    reduce_scatter of the partial sum), first first."""
    found = []
    for use in value.uses:
        user = as_op(use.owner)
        if user.name == SLICE:
            view = SliceOp(user)
            if view.source == value and view.range == producer.range:
                found.append(view)
    return found


def shared_block_sources(value: ir.Value, producer: LoopOp) -> list[tuple[int, RangeType, LoopOp]]:
    """The blocks of `value`, a result of the `sum` loop `producer`, that a reader may take at no further cost, as
    (dim, range, the loop asking for them): those of its slices by a range over `producer`'s axes (each device's
    sum of its block: a reduce_scatter the slice needs anyway), and those of the tile loop over other axes that
    `producer`'s body yields for it (each device holds its block's term: a 2-D nest, data parallel x Megatron)."""
    found = []
    for view in sliced_by_range_of(value, producer):
        reader = next(iter(enclosing_loops(as_op(view.operation))), None)
        found.append((view.dim, producer.range, reader if reader is not None else producer))
    terminator = producer.terminator
    if terminator is not None and terminator.name == YIELD:
        inner = tile_loop_of(terminator.operands[result_index(value)])
        if (inner is not None and as_op(inner[0].operation).block == producer.body and inner[0].range is not None
                and not set(inner[0].range.axes) & set(producer.range.axes)):
            found.append((inner[0].action.dim, inner[0].range, inner[0]))
    return found


def reduce_shared_blocks(op: ir.Operation, journal: Journal) -> bool:
    """`op` reads `v`, a `sum` loop's result, whole, and some blocks of `v` come at no further cost
    (`shared_block_sources`): when the rule table says `op` reduces over that dim (a `sum` outcome, divisible), `op`
    reads `loop tile<d> over R (r -> slice(v, d, r))` instead (see the module docstring)."""
    if op.name.startswith(DIALECT_PREFIX) or op.name in (func.ReturnOp.OPERATION_NAME, YIELD) or not op.results:
        return False
    if op.parent is not None and op.parent.name.startswith(LINALG_PREFIX):
        return False
    for index, value in enumerate(op.operands):
        producer = sum_loop_of(value)
        if producer is None or producer.range is None:
            continue
        busy = enclosing_axes(op)
        for dim, rng, origin in shared_block_sources(value, producer):
            if busy & (set(rng.axes) | set(producer.range.axes)) or not _reduces_over(op, index, dim, rng.size):
                continue  # (inside a loop over those axes, the value is a member there, not read whole)
            journal.rewriting(op)
            _read_blocks(op, index, dim, rng, origin, producer.mesh)
            return True
    return False


def _reduces_over(op: ir.Operation, operand: int, dim: int, size: int) -> bool:
    """Does the rule table compute `op` as a sum of blocks when its operand #`operand` is tiled on `dim`?"""
    try:
        outcome = tile_outcome(op, operand=operand, dim=dim)
    except NoRule:
        return False
    if not outcome.ok or outcome_kind(outcome) != "sum" or len(set(outcome.actions)) > 1:
        return False
    return not _indivisible(op, outcome, size)


def _read_blocks(op: ir.Operation, index: int, dim: int, rng: RangeType, origin: LoopOp, mesh: str) -> None:
    """`op`'s operand #`index` replaced by a loop rebuilding it from its blocks on `dim` over `rng`; the loop
    inherits the provenance of `origin` (the loop asking for those blocks)."""
    value = op.operands[index]
    with ir.InsertionPoint(op), op.location:
        blocks = loop([value.type], mesh=mesh, action=TileAction(dim), range=rng)
        inherit_provenance(blocks.operation, origin, RULE.format(dim=dim, axes=", ".join(rng.axes)))
        with ir.InsertionPoint(blocks.body):
            yield_([slice_(value, blocks.range_arg, dim)])
    op.operands[index] = blocks.results[0]


__all__ = ["reduce_shared_blocks", "shared_block_sources", "sliced_by_range_of", "sum_loop_of"]
