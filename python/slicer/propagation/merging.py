"""Laws that tidy a block: dead ops go, duplicate slices and loops become one, and invariant ops leave their
loop. Upstream DCE and CSE cannot do this for slicer ops (dynamic ops carry no side-effect information)."""

from __future__ import annotations

from mlir import ir

from slicer.core.names import DIALECT_PREFIX, LOOP, SLICE
from slicer.core.operations import as_op
from slicer.dialect import SliceOp

from .ir_utils import BlockOrder, captured_values, defined_inside, equivalent, is_pure, is_unused
from .journal import Journal
from .loop_facts import earlier_in_block, lift_all


def eliminate_dead(op: ir.Operation, journal: Journal) -> bool:
    if is_pure(op) and is_unused(op):
        journal.rewriting(op)
        journal.erase(op)
        return True
    return False


def duplicate_candidates(op: ir.Operation) -> list[ir.Operation]:
    """Ops of `op`'s block (a slice or a loop) that may be duplicates of `op`: for a slice, the slices of its
    source; for a loop, the loops using its first captured value (equivalent loops capture the same values).
    Found through use lists, not by scanning the block: `merge_duplicate_*` run on every new slice and loop.
    A loop's candidates come from the least used of its first few captured values (an equivalent loop captures
    each of them: the same values in the same order), not from a value many loops read."""
    value = SliceOp(op).source if op.name == SLICE else _least_used(captured_values(op, limit=_CAPTURES_ASKED))
    if value is None:
        return [as_op(o) for o in op.block.operations if as_op(o) != op and as_op(o).name == op.name]
    users = [as_op(use.owner) for use in value.uses]
    name, block = op.name, op.block
    if name == SLICE:  # a slice has no region: only slices reading `value` right in the block are candidates
        return [u for u in users if u.name == name and u != op and u.block == block]
    return [u for u in lift_all(users, block) if u.name == name and u != op]


#: How many of a loop's captured values `duplicate_candidates` compares by their number of uses.
_CAPTURES_ASKED = 4


def _least_used(values: list[ir.Value]) -> ir.Value | None:
    return min(values, key=lambda v: sum(1 for _ in v.uses), default=None)


def duplicate_slices(op: ir.Operation) -> list[ir.Operation]:
    """The slices of `op`'s block identical to the slice `op` (same source, range and dim)."""
    view = SliceOp(op)
    return [c for c in duplicate_candidates(op) if _same_slice(SliceOp(c), view)]


def merge_duplicate_slice(op: ir.Operation, journal: Journal) -> bool:
    """Two identical slices (same source, range and dim) in one block are one value: the later one is merged
    into the earlier, whichever of the two is asked (asked at the earlier one, it takes the later ones in:
    otherwise the earlier would be pushed into its producer first, the later after it, and the producer's
    block computed twice, doubling at each level of a chain of values with two consumers).

    Upstream CSE cannot do this: dynamic ops carry no side-effect information."""
    if op.name != SLICE:
        return False
    view = SliceOp(op)
    same = duplicate_slices(op)
    earlier = earlier_in_block(op, same)
    if earlier:
        keep, drop = SliceOp(earlier[0]), op
    elif same:
        keep, drop = view, min(same, key=BlockOrder)
    else:
        return False
    journal.rewriting(drop)
    SliceOp(drop).result.replace_all_uses_with(keep.result)
    journal.erase(drop)
    return True


def _same_slice(a: SliceOp, b: SliceOp) -> bool:
    return a.source == b.source and a.range_value == b.range_value and a.dim == b.dim


def merge_duplicate_loop(op: ir.Operation, journal: Journal) -> bool:
    """Two equivalent loops in one block (same action, range and body, up to renaming) are one loop.

    Deforestation copies a loop body into each consumer; once the consumers' loops are fused, the copies
    sit side by side. Upstream CSE would merge them if it could (see `ir_utils.equivalent`); without this,
    the work and any collective resolving the copies' partial sums are repeated per consumer."""
    if op.name != LOOP:
        return False
    for earlier in earlier_in_block(op, duplicate_candidates(op)):
        if equivalent(earlier, op):
            journal.rewriting(op)
            for old, new in zip(op.results, earlier.results):
                old.replace_all_uses_with(new)
            journal.erase(op)
            return True
    return False


def hoist_invariant(op: ir.Operation, journal: Journal) -> bool:
    """A pure op (a slice included: its range is then an outer loop's) that uses nothing defined in its loop
    moves before the loop."""
    if not is_pure(op) or (op.name.startswith(DIALECT_PREFIX) and op.name != SLICE):
        return False
    parent = op.parent
    if parent is None or as_op(parent).name != LOOP:
        return False
    loop_op = as_op(parent)
    if any(defined_inside(v, loop_op) for v in op.operands):
        return False  # (the cheap half of the next test, asked first)
    if any(defined_inside(v, loop_op) for v in captured_values(op)):
        return False
    journal.rewriting(op, anchor=loop_op)
    journal.move_before(op, loop_op)
    return True
