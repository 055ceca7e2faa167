"""The late law: sibling loops over the same range that read a common value become one loop."""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, linalg, tensor

from slicer.core.capsules import TYPE_CAPSULE, capsule_pointer
from slicer.core.names import LOOP, RANGE_PRODUCT
from slicer.core.operations import as_op, defining_op
from slicer.dialect import LoopOp, loop, yield_

from .ir_utils import BlockOrder, captured_values, op_id
from .journal import Journal
from .loop_facts import earlier_in_block, inherit_provenance, lift, lift_all, move_body

MIXED = "mixed"
"""`sibling_facts`' result type of a loop whose results differ in type: it fuses with no loop."""


def sibling_facts(op: ir.Operation) -> tuple[tuple, object]:
    """What `fuse_sibling_loops` asks two loops to share before anything else, as (key, result type): the key is
    their block (its owner's address), range type, action and mesh; the type is their results' one type (by
    address: types are uniqued), None without results (which matches any), `MIXED` when they differ. Two loops
    fuse only if these match (`may_fuse`). Fixed while the loop stays in its block."""
    view = LoopOp(op)
    types = {capsule_pointer(r.type._CAPIPtr, TYPE_CAPSULE) for r in op.results}
    result_type = MIXED if len(types) > 1 else next(iter(types), None)
    key = (op_id(as_op(op.parent)), capsule_pointer(view.range_arg.type._CAPIPtr, TYPE_CAPSULE), view.action,
           view.mesh)
    return key, result_type


def may_fuse(a: tuple[tuple, object], b: tuple[tuple, object]) -> bool:
    """Do two loops' `sibling_facts` allow fusing them: the same key, and results of one type between them (a
    loop's results share one type, see `_make_loop`)?"""
    (key_a, type_a), (key_b, type_b) = a, b
    return key_a == key_b and MIXED not in (type_a, type_b) and (None in (type_a, type_b) or type_a == type_b)


def fuse_sibling_loops(op: ir.Operation, journal: Journal) -> bool:
    """Two loops in one block over the same range with the same action, neither using the other's results,
    that read a common value, are one loop with both bodies and all results.

    Only loops reading a common computed value (found through use lists, `fusion_candidates`): fusing them
    puts their uses of that value side by side, where `merge_duplicate_slice` makes them one and deforestation can
    give a single-use body away. Loops sharing nothing gain nothing (the partitioner inlines every loop body)
    and asking every pair of a block made the late phase quadratic in the number of loops."""
    if op.name != LOOP:
        return False
    facts = sibling_facts(op)
    captured = captured_values(op)
    producers = None  # the producers in `op`'s block of what it reads (`_producers_in_block`), once asked
    for earlier in _candidates(op, captured, journal.unchanged):
        if not may_fuse(sibling_facts(earlier), facts):
            continue
        # The fused loop stands where the second one is if nothing between them uses the first's results,
        # else where the first is if the second needs nothing defined between. Neither: no fusion, and the
        # (costlier) dependence walk is not needed (most candidates of a training step's loops end here).
        used_between = any(_used_between(r, earlier, op) for r in earlier.results)
        if used_between:
            producers = _producers_in_block(op, captured) if producers is None else producers
            if any(earlier.is_before_in_block(p) for p in producers):
                continue
        if _depends_on(op, earlier):
            continue
        journal.rewriting(op, anchor=earlier if used_between else op)
        _fuse(LoopOp(earlier), LoopOp(op), journal, at=earlier if used_between else op)
        return True
    return False


_SHARED_FOR_NOTHING = frozenset({arith.ConstantOp.OPERATION_NAME, tensor.EmptyOp.OPERATION_NAME,
                                 linalg.FillOp.OPERATION_NAME, RANGE_PRODUCT})


def fusion_candidates(op: ir.Operation) -> list[ir.Operation]:
    """The loops before `op` in its block that read a value `op` reads, first first: a value from outside
    both that is computed (not a constant, an empty tensor, a fill or a range)."""
    return _candidates(op, captured_values(op))


def _candidates(op: ir.Operation, captured: list[ir.Value], memo: dict | None = None) -> list[ir.Operation]:
    """`fusion_candidates` of `op`, given its captured values; `memo` (`Journal.unchanged`) keeps each value's
    loops in the block until the IR changes (the late phase asks every loop after a fusion, and the loops of a
    training step read the same activations and parameters)."""
    memo = {} if memo is None else memo
    found: dict[int, ir.Operation] = {}
    seen: set[int] = set()
    arguments: set[ir.Value] = set()  # block arguments asked already (values hash by address)
    block = op.block
    for value in captured:
        producer = defining_op(value)
        if producer is None:
            if value in arguments:
                continue
            arguments.add(value)
        else:
            producer_id = op_id(producer)
            if producer_id in seen or producer.name in _SHARED_FOR_NOTHING:
                continue
            seen.add(producer_id)
        if not isinstance(value.type, ir.RankedTensorType):
            continue
        key = ("loops reading", value, block)
        loops = memo.get(key)
        if loops is None:
            users = lift_all([as_op(use.owner) for use in value.uses], block)
            loops = memo[key] = [o for o in users if o.name == LOOP]
        for other in loops:
            found.setdefault(op_id(other), other)
    return earlier_in_block(op, found.values())


def _depends_on(op: ir.Operation, earlier: ir.Operation) -> bool:
    """Does `op` use (through ops of the same block) a result of `earlier`? Walks forward from `earlier`'s
    results through their users, lifted to the block, up to `op` (a user after `op` cannot lead to it).

    Depth first, the latest users first: most loops asked about do depend on the earlier one (a backward loop
    on its forward loop through the rest of the step), and a chain to `op` runs forward in the block, so the
    latest users find it sooner (on a 2-block GPT's ZeRO-3 step, 30 ops walked per question instead of 49)."""
    block = op.block
    stack, seen = [earlier], {op_id(earlier)}
    while stack:
        current = stack.pop()
        found = []
        for result in current.results:
            for use in result.uses:
                user = lift(as_op(use.owner), block)
                if user is None:
                    continue
                if user == op:
                    return True
                user_id = op_id(user)
                if user_id in seen or op.is_before_in_block(user):
                    continue
                seen.add(user_id)
                found.append(user)
        if len(found) > 1:
            found.sort(key=BlockOrder)
        stack += found
    return False


def _used_between(value: ir.Value, first: ir.Operation, second: ir.Operation) -> bool:
    for use in value.uses:
        user = as_op(use.owner)
        while user.block != first.block:
            user = as_op(user.parent)
        if first.is_before_in_block(user) and user.is_before_in_block(second):
            return True
    return False


def _producers_in_block(op: ir.Operation, captured: list[ir.Value]) -> list[ir.Operation]:
    """The ops of `op`'s block defining values `op` reads (`captured`): `op` may not move before any of them."""
    block = op.block
    owners = (defining_op(value) for value in captured)
    return [owner for owner in owners if owner is not None and owner.block == block]


def _fuse(first: LoopOp, second: LoopOp, journal: Journal, *, at: ir.Operation) -> None:
    loc = first.operation.location
    with ir.InsertionPoint(at), loc:
        fused = loop([r.type for r in first.results + second.results], mesh=first.mesh, action=first.action,
                     range=first.range)
        inherit_provenance(fused.operation, first, f"fusion of sibling loops over {', '.join(first.range.axes)}")
    with ir.InsertionPoint(fused.body), loc:
        anchor = yield_([])
    # The bodies join a loop over the same range with the same action: the ops keep their answers to every law
    # but the merging of duplicates (`settled`), and are not asked again (each fusion moved the bodies fused so
    # far once more: asking all their ops again was most of a ZeRO training step's propagation).
    yielded = (move_body(first, fused.range_arg, journal, before=anchor, settled=True)
               + move_body(second, fused.range_arg, journal, before=anchor, settled=True))
    with ir.InsertionPoint(anchor), loc:
        yield_(yielded)
    anchor.erase()
    for old, new in zip(first.results + second.results, fused.results):
        old.replace_all_uses_with(new)
    journal.erase(first.operation)
    journal.erase(second.operation)
