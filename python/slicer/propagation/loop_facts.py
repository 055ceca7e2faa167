"""What the laws ask of a loop and the rule table, shared by every group of laws: its provenance (tactic,
priority, rule), whether a consumer may take its body, and where an op stands in a block."""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, builtin, tensor

from slicer.core.names import LOOP, PRIORITY_ATTR, RANGE_PRODUCT, RULE_ATTR, SLICE, TACTIC_ATTR, YIELD
from slicer.core.operations import as_op, defining_op
from slicer.dialect import LoopOp, SumAction, TileAction
from slicer.rules import RuleOutcome, rule_for

from .ir_utils import BlockOrder, op_id, result_index
from .journal import Journal

NO_PRIORITY = 1 << 30


def tile_outcome(op: ir.Operation, **where) -> RuleOutcome:
    """The rule table's answer for tiling one dim of `op` (operand=k or result=r, dim=j).

    Raises NoRule when the op has no entry at all."""
    return rule_for(op).tile(**where)


def outcome_kind(outcome: RuleOutcome) -> str:
    return "sum" if all(isinstance(a, SumAction) for a in outcome.actions) else "tile"


def describe(op: ir.Operation, outcome: RuleOutcome) -> str:
    if outcome.gather is not None:
        return (f"{op.name}: a gather by index tiled along its table's indexed dim (operand #{outcome.gather[0]} "
                f"dim {outcome.gather[1]}) -> sum of masked lookups")
    what = "a reduction with an additive combiner -> sum" if outcome_kind(outcome) == "sum" else "parallel -> tile"
    return f"{op.name}: d{outcome.loop} is {what}"


def priority(loop_op: LoopOp) -> int:
    attrs = loop_op.operation.attributes
    return ir.IntegerAttr(attrs[PRIORITY_ATTR]).value if PRIORITY_ATTR in attrs else NO_PRIORITY


def tactic_name(loop_op: LoopOp) -> str:
    attrs = loop_op.operation.attributes
    return ir.StringAttr(attrs[TACTIC_ATTR]).value if TACTIC_ATTR in attrs else "an unnamed loop"


def inherit_provenance(new: ir.Operation, origin: LoopOp, rule: str) -> None:
    for name in (TACTIC_ATTR, PRIORITY_ATTR):
        if name in origin.operation.attributes:
            new.attributes[name] = origin.operation.attributes[name]
    new.attributes[RULE_ATTR] = ir.StringAttr.get(rule)


def tile_loop_of(value: ir.Value) -> tuple[LoopOp, int] | None:
    """(loop, result index) when `value` is a result of a `slicer.loop` with a tile action."""
    owner = defining_op(value)
    if owner is None or owner.name != LOOP:
        return None
    view = LoopOp(owner)
    return (view, result_index(value)) if isinstance(view.action, TileAction) else None


def move_body(loop_op: LoopOp, range_value: ir.Value, journal: Journal | None, *, before: ir.Operation,
              settled: bool = False) -> list[ir.Value]:
    """Move `loop_op`'s body (its range replaced by `range_value`) before `before`; the yielded values.
    `journal` is told of each move (None: the loop is a copy made by this rewrite; `settled`: see
    `RewriteListener.moving`)."""
    loop_op.range_arg.replace_all_uses_with(range_value)
    body = [as_op(o) for o in loop_op.body.operations]
    for inner in body[:-1]:
        if journal is None:
            inner.move_before(before)
        else:
            journal.move_before(inner, before, settled)
    return list(body[-1].operands)


def _copy_body(loop_op: LoopOp, range_value: ir.Value, *, before: ir.Operation) -> list[ir.Value]:
    """Like `move_body` on a copy: `loop_op` itself is left as it is (it may have other users)."""
    clone = LoopOp(loop_op.operation.clone(ip=ir.InsertionPoint(before)))
    yielded = move_body(clone, range_value, None, before=before)
    clone.operation.erase()
    return yielded


# Ops a loop body may hold and still be copied into every consumer: they compute nothing (a tactic's loop
# `loop { slice(%arg) }`, zeros made for a sum). A body that computes is never copied (see `may_take_body`).
_FREE_OPS = frozenset({SLICE, RANGE_PRODUCT, YIELD, arith.ConstantOp.OPERATION_NAME, tensor.EmptyOp.OPERATION_NAME})


def _single_use(loop_op: LoopOp) -> bool:
    """Is there exactly one use of all of `loop_op`'s results together?"""
    uses = 0
    for result in loop_op.operation.results:  # (lazily: a fused loop has many results, the answer comes early)
        for _ in result.uses:
            uses += 1
            if uses > 1:
                return False
    return uses == 1


def _computes_nothing(loop_op: LoopOp) -> bool:
    return all(as_op(inner).name in _FREE_OPS for inner in loop_op.body.operations)


def may_take_body(loop_op: LoopOp) -> bool:
    """May a consumer's slice take `loop_op`'s body (`take_body`)?

    This is what keeps propagation linear in the program (docs/propagation.md, "Cost"): a loop with a single
    use gives its body away (moved, and the loop erased); a loop whose body computes nothing is copied; a
    loop that computes and has several consumers is left alone. Each consumer then reads its block of the
    shared result, `slice(loop_tile<d>(...), d, r)`, which the partitioner types as the device's own block
    (no copy, no communication). Copying instead made every consumer carry its own copy of the whole chain
    of producers before it: a residual stream doubles it at each block, exponential in depth."""
    return _single_use(loop_op) or _computes_nothing(loop_op)


def take_body(loop_op: LoopOp, range_value: ir.Value, journal: Journal, *, before: ir.Operation) -> list[ir.Value]:
    """The body of `loop_op` (range replaced by `range_value`) placed before `before`, for the one consumer
    the caller is rewriting: moved out of a single-use loop, else copied (`may_take_body` holds)."""
    if _single_use(loop_op):
        return move_body(loop_op, range_value, journal, before=before, settled=_same_place(loop_op, range_value))
    return _copy_body(loop_op, range_value, before=before)


def _same_place(loop_op: LoopOp, range_value: ir.Value) -> bool:
    """Does `loop_op`'s body move into a loop of its own block over the same range, `range_value` being that
    loop's range (a chain of single-use loops, each consumer pulled into a loop and its producer's body moved
    in)? The body's ops then keep their answers to every law but the merging of duplicates: their enclosing
    loops have the same axes, their range is one of the same type, and what they read and what reads them moves
    with them (the yielded values' new readers are the rewrite's own). Moved `settled`, they are not asked
    again: each consumer pulled in moved the chain's body so far once more, and asking all of it again made
    propagation quadratic in a chain's length (`RewriteListener.moving`)."""
    if not isinstance(range_value, ir.BlockArgument) or range_value.type != loop_op.range_arg.type:
        return False
    home = range_value.owner.owner
    return home is not None and as_op(home).name == LOOP and as_op(home).block == loop_op.operation.block


def earlier_in_block(op: ir.Operation, candidates) -> list[ir.Operation]:
    """The ops of `candidates` (ops of `op`'s block) that stand before `op`, first first."""
    found = [c for c in candidates if c != op and c.is_before_in_block(op)]
    found.sort(key=BlockOrder)
    return found


def lift(op: ir.Operation, block: ir.Block) -> ir.Operation | None:
    """`op`'s ancestor (or itself) in `block`, None when `op` is not inside `block`."""
    while op.block != block:
        parent = op.parent
        if parent is None or as_op(parent).name == builtin.ModuleOp.OPERATION_NAME:
            return None
        op = as_op(parent)
    return op


def lift_all(ops, block: ir.Block) -> list[ir.Operation]:
    """Each of `ops` lifted to its ancestor in `block` (ops not inside `block` dropped), without repeats (told
    apart by address: a list membership test compared each op with every earlier one, and a value's users
    are often many)."""
    lifted, seen = [], set()
    for candidate in ops:
        candidate = lift(candidate, block)
        if candidate is not None:
            i = op_id(candidate)
            if i not in seen:
                seen.add(i)
                lifted.append(candidate)
    return lifted
