"""The rewrites of the loop/slice calculus, each a function `op -> bool` (True if it rewrote).

In the order the engine tries them (`LAWS`, then `LATE_LAWS`):
- `eliminate_dead`: unused value-semantics ops (slicer loops and slices included,
  which upstream DCE cannot remove: dynamic ops carry no side-effect information).
- `merge_duplicate_slice`: two identical slices in one block are one value (so
  CSE can merge what deforestation copied for each consumer).
- `merge_duplicate_loop`: two equivalent loops in one block are one loop (the
  CSE upstream cannot do for dynamic ops).
- `order_slices`: slices of slices along different dims commute; the one by the
  outer loop's range goes first (then it can be hoisted out of the inner loop).
- `compose_slices`: slices of slices along one dim are one slice over the
  product range (range algebra), which deforestation then matches against a
  loop over that product range.
- `deforest`: slice(loop_tile<d>(r' -> body(r')), d, r) == body(r).
- `commute_slice_into_loop`: a slice over range r of a loop over other axes is
  a loop over those axes of the slices of its blocks.
- `push_slice_into_producer` (backward): a block of an op's result is the op on
  blocks of its operands, when the rule table says so.
- `pull_op_into_loop` (forward): an op consuming a tile loop's result becomes a
  loop (tile or sum, by the rule table) over the same range computing it block-wise.
- `hoist_invariant`: a pure op in a loop body that uses nothing from the body
  moves before the loop.
- `fuse_sibling_loops`: independent loops over the same range with the same
  action and one result type in one block become one loop.
Provenance: loops made here carry `slicer.rule` (which rule) and inherit
`slicer.tactic` / `slicer.priority` (which tactic started the chain).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from mlir import ir
from mlir.dialects import arith, linalg, tensor

from slicer.core.names import DIALECT_PREFIX, LOOP, PRIORITY_ATTR, RANGE_PRODUCT, RULE_ATTR, SLICE, TACTIC_ATTR, YIELD
from slicer.dialect import LoopOp, SliceOp, SumAction, TileAction, loop, range_product, slice_, walk_ops, with_dim, yield_
from slicer.rules import NoRule, RuleOutcome, kept_dims, rule_for

from .ir_utils import (
    BlockOrder,
    ancestors,
    as_op,
    captured_values,
    defined_inside,
    defining_op,
    enclosing_axes,
    equivalent,
    is_pure,
    is_unused,
    is_zero_tensor,
    op_id,
    result_index,
)
NO_PRIORITY = 1 << 30


class UnsupportedOp(Exception):
    """A tiled value reached an op the rule table knows nothing about."""

    def __init__(self, op: ir.Operation, message: str):
        super().__init__(message)
        self.op = op


class RewriteListener:
    """What the engine's worklist (`engine._Worklist`) is told about a rewrite, as MLIR's
    `RewriterBase::Listener` is (the Python bindings have no listener for rewrites made outside patterns)."""

    def before(self, op: ir.Operation, anchor: ir.Operation) -> None:
        """A law is about to rewrite at `op`; new ops will stand right before `anchor` in its block."""

    def erasing(self, op: ir.Operation) -> None:
        """`op` (and everything nested in it) is about to be erased."""

    def moving(self, op: ir.Operation) -> None:
        """`op` is about to move to the rewrite's insertion point (before the anchor)."""


@dataclass
class Journal:
    """What propagation did and could not do (for explain() and conflict reports).

    Every law calls `rewriting(op)` once it has decided to rewrite at `op`, before it changes anything, and
    erases or moves ops that existed before the rewrite through `erase` and `move_before`: the engine's
    worklist (`listener`) keeps its table of ops exact with these."""

    blocked: list[tuple[ir.Operation, str]] = field(default_factory=list)
    rewrites: int = 0
    last_law: str = ""  # the name of the law that made the last rewrite (the budget error names it)
    listener: RewriteListener = field(default_factory=RewriteListener)

    # Blocks of values already computed by backward propagation: (producer address, result, dim, range) ->
    # (the block-wise clone, result index). A later slice asking for the same block reuses the clone instead of
    # making another: without this, a value read by two consumers was sliced twice, each slice pushed into its
    # producer in turn (the first one erased before the second appeared), so each level of a chain of such
    # values doubled the work (exponential in depth). Entries are dropped when an op they name is erased.
    blocks: dict[tuple, tuple[ir.Operation, int]] = field(default_factory=dict)
    _keys_of: dict[int, list[tuple]] = field(default_factory=dict)

    def rewriting(self, op: ir.Operation, anchor: ir.Operation | None = None) -> None:
        """About to rewrite at `op` (the op the law matched); new ops go right before `anchor` (default `op`)."""
        self.listener.before(op, op if anchor is None else anchor)

    def erase(self, op: ir.Operation) -> None:
        self.listener.erasing(op)
        if self.blocks:
            for inner in walk_ops(op):
                for key in self._keys_of.pop(op_id(inner), ()):
                    self.blocks.pop(key, None)
        op.erase()

    def remember_block(self, key: tuple, clone: ir.Operation, result: int) -> None:
        self.blocks[key] = (clone, result)
        for named in (key[0], key[3][0], op_id(clone)):
            self._keys_of.setdefault(named, []).append(key)

    def move_before(self, op: ir.Operation, anchor: ir.Operation) -> None:
        self.listener.moving(op)
        op.move_before(anchor)


def _tile_outcome(op: ir.Operation, **where) -> RuleOutcome:
    """The rule table's answer for tiling one dim of `op` (operand=k or result=r, dim=j).

    Raises NoRule when the op has no entry at all."""
    return rule_for(op).tile(**where)


def _kind(outcome: RuleOutcome) -> str:
    return "sum" if all(isinstance(a, SumAction) for a in outcome.actions) else "tile"


def _describe(op: ir.Operation, outcome: RuleOutcome) -> str:
    what = "a reduction with an additive combiner -> sum" if _kind(outcome) == "sum" else "parallel -> tile"
    return f"{op.name}: d{outcome.loop} is {what}"


def priority(loop_op: LoopOp) -> int:
    attrs = loop_op.operation.attributes
    return ir.IntegerAttr(attrs[PRIORITY_ATTR]).value if PRIORITY_ATTR in attrs else NO_PRIORITY


def tactic_name(loop_op: LoopOp) -> str:
    attrs = loop_op.operation.attributes
    return ir.StringAttr(attrs[TACTIC_ATTR]).value if TACTIC_ATTR in attrs else "an unnamed loop"


def _inherit_provenance(new: ir.Operation, origin: LoopOp, rule: str) -> None:
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


# ----------------------------------------------------------------------------- loop bodies


def _move_body(loop_op: LoopOp, range_value: ir.Value, journal: Journal | None, *, before: ir.Operation) -> list[ir.Value]:
    """Move `loop_op`'s body (its range replaced by `range_value`) before `before`; the yielded values.
    `journal` is told of each move (None: the loop is a copy made by this rewrite)."""
    loop_op.range_arg.replace_all_uses_with(range_value)
    body = [as_op(o) for o in loop_op.body.operations]
    for inner in body[:-1]:
        if journal is None:
            inner.move_before(before)
        else:
            journal.move_before(inner, before)
    return list(body[-1].operands)


def _copy_body(loop_op: LoopOp, range_value: ir.Value, *, before: ir.Operation) -> list[ir.Value]:
    """Like `_move_body` on a copy: `loop_op` itself is left as it is (it may have other users)."""
    clone = LoopOp(loop_op.operation.clone(ip=ir.InsertionPoint(before)))
    yielded = _move_body(clone, range_value, None, before=before)
    clone.operation.erase()
    return yielded


# Ops a loop body may hold and still be copied into every consumer: they compute nothing (a tactic's loop
# `loop { slice(%arg) }`, zeros made for a sum). A body that computes is never copied (see `_may_take_body`).
_FREE_OPS = frozenset({SLICE, RANGE_PRODUCT, YIELD, "arith.constant", "tensor.empty"})


def _single_use(loop_op: LoopOp) -> bool:
    """Is there exactly one use of all of `loop_op`'s results together?"""
    uses = 0
    for result in loop_op.results:
        for _ in result.uses:
            uses += 1
            if uses > 1:
                return False
    return uses == 1


def _computes_nothing(loop_op: LoopOp) -> bool:
    return all(as_op(inner).name in _FREE_OPS for inner in loop_op.body.operations)


def _may_take_body(loop_op: LoopOp) -> bool:
    """May a consumer's slice take `loop_op`'s body (`_take_body`)?

    This is what keeps propagation linear in the program (docs/propagation.md, "Cost"): a loop with a single
    use gives its body away (moved, and the loop erased); a loop whose body computes nothing is copied; a
    loop that computes and has several consumers is left alone. Each consumer then reads its block of the
    shared result, `slice(loop_tile<d>(...), d, r)`, which the partitioner types as the device's own block
    (no copy, no communication). Copying instead made every consumer carry its own copy of the whole chain
    of producers before it: a residual stream doubles it at each block, exponential in depth."""
    return _single_use(loop_op) or _computes_nothing(loop_op)


def _take_body(loop_op: LoopOp, range_value: ir.Value, journal: Journal, *, before: ir.Operation) -> list[ir.Value]:
    """The body of `loop_op` (range replaced by `range_value`) placed before `before`, for the one consumer
    the caller is rewriting: moved out of a single-use loop, else copied (`_may_take_body` holds)."""
    if _single_use(loop_op):
        return _move_body(loop_op, range_value, journal, before=before)
    return _copy_body(loop_op, range_value, before=before)


# ----------------------------------------------------------------------------- dead code


def eliminate_dead(op: ir.Operation, journal: Journal) -> bool:
    if is_pure(op) and is_unused(op):
        journal.rewriting(op)
        journal.erase(op)
        return True
    return False


def _earlier_in_block(op: ir.Operation, candidates) -> list[ir.Operation]:
    """The ops of `candidates` (ops of `op`'s block) that stand before `op`, first first."""
    found = [c for c in candidates if c != op and c.is_before_in_block(op)]
    found.sort(key=BlockOrder)
    return found


def duplicate_candidates(op: ir.Operation) -> list[ir.Operation]:
    """Ops of `op`'s block (a slice or a loop) that may be duplicates of `op`: for a slice, the slices of its
    source; for a loop, the loops using its first captured value (equivalent loops capture the same values).
    Found through use lists, not by scanning the block: `merge_duplicate_*` run on every new slice and loop."""
    value = SliceOp(op).source if op.name == SLICE else next(iter(captured_values(op, limit=1)), None)
    if value is None:
        return [as_op(o) for o in op.block.operations if as_op(o) != op and as_op(o).name == op.name]
    users = [as_op(use.owner) for use in value.uses]
    return [u for u in _lift_all(users, op.block) if u != op and u.name == op.name]


def _lift_all(ops, block: ir.Block) -> list[ir.Operation]:
    """Each of `ops` lifted to its ancestor in `block` (ops not inside `block` dropped), without repeats."""
    lifted = []
    for candidate in ops:
        candidate = _lift(candidate, block)
        if candidate is not None and candidate not in lifted:
            lifted.append(candidate)
    return lifted


def merge_duplicate_slice(op: ir.Operation, journal: Journal) -> bool:
    """Two identical slices (same source, range and dim) in one block are one value: the later one is merged
    into the earlier, whichever of the two is asked (asked at the earlier one, it takes the later ones in:
    otherwise the earlier would be pushed into its producer first, the later after it, and the producer's
    block computed twice, doubling at each level of a chain of values with two consumers).

    Upstream CSE cannot do this: dynamic ops carry no side-effect information."""
    if op.name != SLICE:
        return False
    view = SliceOp(op)
    same = [c for c in duplicate_candidates(op) if _same_slice(SliceOp(c), view)]
    earlier = _earlier_in_block(op, same)
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
    for earlier in _earlier_in_block(op, duplicate_candidates(op)):
        if equivalent(earlier, op):
            journal.rewriting(op)
            for old, new in zip(op.results, earlier.results):
                old.replace_all_uses_with(new)
            journal.erase(op)
            return True
    return False


# ----------------------------------------------------------------------------- slice composition


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
    journal.rewriting(op)
    with ir.InsertionPoint(op), op.location:
        product = range_product(inner.range_value, outer.range_value)
        composed = slice_(inner.source, product, outer.dim)
    outer.result.replace_all_uses_with(composed)
    journal.erase(op)
    return True


# ----------------------------------------------------------------------------- deforestation


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
    if not _may_take_body(producer):
        return False  # a shared block: the slice stays and reads it
    busy = enclosing_axes(op)
    if busy and _inner_loop_axes(producer) & busy:
        return False  # the copied body would put a loop inside a loop over the same axis
    journal.rewriting(op)
    value = _take_body(producer, view.range_value, journal, before=op)[index]
    view.result.replace_all_uses_with(value)
    journal.erase(op)
    if is_unused(producer.operation):
        journal.erase(producer.operation)  # its body was moved out
    return True


# ----------------------------------------------------------------------------- commuting


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
    if not _may_take_body(producer):
        return False  # the partitioner takes the block of the shared result
    busy = enclosing_axes(op)
    if busy and (set(producer.range.axes) | _inner_loop_axes(producer)) & busy:
        return False  # the new loop (or one copied in its body) would sit inside a loop over the same axes
    journal.rewriting(op)
    index = result_index(view.source)
    rule = f"slice over {', '.join(view.range.axes)} commuted into the loop over {', '.join(producer.range.axes)}"
    with ir.InsertionPoint(op), op.location:
        new_loop = loop([view.result.type], mesh=producer.mesh, action=producer.action, range=producer.range)
        _inherit_provenance(new_loop.operation, producer, rule)
    with ir.InsertionPoint(new_loop.body), op.location:
        anchor = yield_([])  # placeholder terminator to move the body before
    yielded = _take_body(producer, new_loop.range_arg, journal, before=anchor)[index]
    with ir.InsertionPoint(anchor), op.location:
        yield_([slice_(yielded, view.range_value, view.dim)])
    anchor.erase()
    view.result.replace_all_uses_with(new_loop.results[0])
    journal.erase(op)
    if is_unused(producer.operation):
        journal.erase(producer.operation)  # its body was moved into the new loop
    return True


# ----------------------------------------------------------------------------- backward


def push_slice_into_producer(op: ir.Operation, journal: Journal) -> bool:
    if op.name != SLICE:
        return False
    view = SliceOp(op)
    producer = defining_op(view.source)
    if producer is None or producer.name.startswith(DIALECT_PREFIX) or producer.name == "func.call":
        return False
    rng = view.range
    try:
        outcome = _tile_outcome(producer, result=result_index(view.source), dim=view.dim)
    except NoRule:
        return False
    if not outcome.ok or _kind(outcome) != "tile":
        return False
    if not _divisible(producer, outcome, rng.size):
        return False
    key = (op_id(producer), result_index(view.source), view.dim, _range_key(view.range_value))
    known = journal.blocks.get(key)
    if known is not None and _dominates(known[0], op):
        # This block of the value was computed already (for an earlier slice, since erased): reuse it.
        journal.rewriting(op)
        view.result.replace_all_uses_with(known[0].results[known[1]])
        journal.erase(op)
        return True
    journal.rewriting(op)
    with ir.InsertionPoint(op), op.location:
        clone = _blockwise_clone(producer, outcome, view.range_value, rng.size, ir.InsertionPoint(op))
    view.result.replace_all_uses_with(clone.results[key[1]])
    journal.erase(op)
    journal.remember_block(key, clone, key[1])
    return True


def _range_key(range_value: ir.Value) -> tuple[int, int]:
    """The identity of a range value: (address of the op defining it, or of its loop, argument/result number)."""
    if isinstance(range_value, ir.BlockArgument):
        return op_id(as_op(range_value.owner.owner)), ir.BlockArgument(range_value).arg_number
    return op_id(defining_op(range_value)), result_index(range_value)


def _dominates(op: ir.Operation, user: ir.Operation) -> bool:
    """Is `op` before `user` in `op`'s block, or before the op of that block that holds `user`?"""
    holder = _lift(user, op.block)
    return holder is not None and holder != op and op.is_before_in_block(holder)


def _result_dims(outcome: RuleOutcome) -> dict[int, int]:
    """Result index -> dim the result is tiled on (tile outcomes only)."""
    return {r: a.dim for r, a in enumerate(outcome.actions) if isinstance(a, TileAction)}


def _divisible(op: ir.Operation, outcome: RuleOutcome, size: int) -> bool:
    """Does every dim the outcome cuts have a static size divisible by `size`? (A dynamic dim is never cut:
    programs with dynamic dims are partitioned along their static ones.)"""
    for index, dim in outcome.slices:
        type_ = ir.RankedTensorType(op.operands[index].type)
        if type_.is_dynamic_dim(dim) or type_.shape[dim] % size:
            return False
    for index, dim in _result_dims(outcome).items():
        type_ = ir.RankedTensorType(op.results[index].type)
        if type_.is_dynamic_dim(dim) or type_.shape[dim] % size:
            return False
    return True


def _blockwise_clone(op: ir.Operation, outcome: RuleOutcome, range_value: ir.Value, size: int, ip) -> ir.Operation:
    """A copy of `op` computing one block: sliced operands, block-typed results."""
    slices = outcome.slice_map
    operands = [slice_(v, range_value, slices[i]) if i in slices else v for i, v in enumerate(op.operands)]
    if _kind(outcome) == "sum":
        for index in outcome.zero_inits:
            operands[index] = _zeros(ir.RankedTensorType(op.operands[index].type))
    clone = as_op(op.clone(ip=ip))
    for index, value in enumerate(operands):
        clone.operands[index] = value
    for index, dim in _result_dims(outcome).items():
        old = ir.RankedTensorType(op.results[index].type)
        clone.results[index].set_type(with_dim(old, dim, old.shape[dim] // size))
    _update_static_shapes(clone, op)
    return clone


def _update_static_shapes(op: ir.Operation, original: ir.Operation) -> None:
    """Ops that repeat their shapes in attributes get them updated to the block's shapes (`op` is the
    block-wise copy of `original`)."""
    if op.name == "tensor.expand_shape":
        op.attributes["static_output_shape"] = ir.DenseI64ArrayAttr.get(list(op.results[0].type.shape))
    elif op.name in ("tensor.extract_slice", "tensor.insert_slice"):
        # The slice's sizes, the dims a rank-reducing slice drops (unit sizes) included.
        part = 0 if op.name == "tensor.insert_slice" else None
        old = original.operands[part].type if part is not None else original.results[0].type
        new = op.operands[part].type if part is not None else op.results[0].type
        sizes = list(ir.DenseI64ArrayAttr(original.attributes["static_sizes"]))
        for r, d in enumerate(kept_dims(original, old)):
            sizes[d] = new.shape[r]
        op.attributes["static_sizes"] = ir.DenseI64ArrayAttr.get(sizes)
    elif op.name == "arith.constant" and isinstance(op.results[0].type, ir.RankedTensorType):
        splat = ir.DenseElementsAttr(op.attributes["value"]).get_splat_value()
        op.attributes["value"] = ir.DenseElementsAttr.get_splat(op.results[0].type, splat)


def _zeros(type_: ir.RankedTensorType) -> ir.Value:
    element = type_.element_type
    zero = arith.constant(element, 0.0 if isinstance(element, ir.FloatType) else 0)
    return linalg.fill(zero, outs=[tensor.empty(type_.shape, element)])


# ----------------------------------------------------------------------------- forward


@dataclass(frozen=True)
class Candidate:
    operand: int
    producer: LoopOp
    dim: int


def forward_candidates(op: ir.Operation) -> list[Candidate]:
    """Operands of `op` produced by tile loops, earliest tactic first."""
    found = []
    for index, value in enumerate(op.operands):
        loop_and_result = tile_loop_of(value)
        if loop_and_result is not None:
            producer, _ = loop_and_result
            found.append(Candidate(index, producer, producer.action.dim))
    return sorted(found, key=lambda c: (priority(c.producer), c.operand))


def pull_op_into_loop(op: ir.Operation, journal: Journal) -> bool:
    if op.name.startswith(DIALECT_PREFIX) or op.name in ("func.return", YIELD) or not op.results:
        return False
    candidates = forward_candidates(op)
    if not candidates:
        return False
    busy_axes = enclosing_axes(op)
    for candidate in candidates:
        rng = candidate.producer.range
        if busy_axes & set(rng.axes):
            continue  # already partitioned over these axes here: a conflict, reported at the end
        try:
            outcome = _tile_outcome(op, operand=candidate.operand, dim=candidate.dim)
        except NoRule as exc:
            raise UnsupportedOp(op, (
                f"cannot propagate the tiling of operand #{candidate.operand} dim {candidate.dim} (over "
                f"{', '.join(rng.axes)}, from {tactic_name(candidate.producer)}) through '{op.name}': {exc}. "
                "Or replicate the operand before this op (slicer.Replicate / an all-empty slicer.annotate)"))
        if not outcome.ok:
            journal.blocked.append((op, outcome.blocked))
            continue
        if len(set(outcome.actions)) > 1:
            journal.blocked.append((op, f"{op.name} results would be rebuilt with different actions {outcome.actions}"))
            continue
        if not _divisible(op, outcome, rng.size):
            journal.blocked.append((op, f"{op.name}: a sliced dim is dynamic or not divisible by {rng.size} "
                                        f"({', '.join(rng.axes)})"))
            continue
        journal.rewriting(op)
        _make_loop(op, candidate, outcome, journal)
        return True
    return False


def _same_type_groups(values) -> list[list[int]]:
    """Indices of `values` grouped by type, in order of first appearance."""
    groups: dict[str, list[int]] = {}
    for index, value in enumerate(values):
        groups.setdefault(str(value.type), []).append(index)
    return list(groups.values())


def _make_loop(op: ir.Operation, candidate: Candidate, outcome: RuleOutcome, journal: Journal) -> None:
    """Replace `op` by a loop computing it block-wise. A `slicer.loop`'s results share one type (IRDL 22
    binds a variadic result constraint to a single type, see slicer.irdl.mlir), so an op whose results
    have different types gets one loop per result type, each with its own block-wise copy of the op."""
    producer, rng = candidate.producer, candidate.producer.range
    action = outcome.action
    rule = f"forward: {_describe(op, outcome)} (from operand #{candidate.operand} dim {candidate.dim} tiled over {', '.join(rng.axes)})"
    results: list[ir.Value | None] = [None] * len(op.results)
    with ir.InsertionPoint(op), op.location:
        for group in _same_type_groups(op.results):
            new_loop = loop([op.results[i].type for i in group], mesh=producer.mesh, action=action, range=rng)
            _inherit_provenance(new_loop.operation, producer, rule)
            with ir.InsertionPoint(new_loop.body):
                clone = _blockwise_clone(op, outcome, new_loop.range_arg, rng.size, ir.InsertionPoint(new_loop.body))
                yield_([clone.results[i] for i in group])
            for i, value in zip(group, new_loop.results):
                results[i] = value
        if _kind(outcome) == "sum":
            # The loop summed blocks computed from zeros; add the real initial value once.
            for index in outcome.zero_inits:
                init = op.operands[index]
                if not is_zero_tensor(init):
                    r = index - (len(op.operands) - len(op.results))
                    results[r] = linalg.add(results[r], init, outs=[tensor.empty(ir.RankedTensorType(init.type).shape, ir.RankedTensorType(init.type).element_type)])
    for old, new in zip(op.results, results):
        old.replace_all_uses_with(new)
    journal.erase(op)


# ----------------------------------------------------------------------------- fusion


def fuse_sibling_loops(op: ir.Operation, journal: Journal) -> bool:
    """Two loops in one block over the same range with the same action, neither using the other's results,
    that read a common value, are one loop with both bodies and all results.

    Only loops reading a common computed value (found through use lists, `fusion_candidates`): fusing them
    puts their uses of that value side by side, where `merge_duplicate_slice` makes them one and deforestation can
    give a single-use body away. Loops sharing nothing gain nothing (the partitioner inlines every loop body)
    and asking every pair of a block made the late phase quadratic in the number of loops."""
    if op.name != LOOP:
        return False
    second = LoopOp(op)
    earlier_loops = fusion_candidates(op)
    for earlier in earlier_loops:
        first = LoopOp(earlier)
        if (first.range_arg.type != second.range_arg.type or first.action != second.action
                or first.mesh != second.mesh):
            continue
        if len({str(r.type) for r in first.results + second.results}) != 1:
            continue  # a loop's results share one type (see _make_loop)
        if _depends_on(op, earlier):
            continue
        # The fused loop stands where the second one is if nothing between them uses the
        # first's results, else where the first is if the second needs nothing defined between.
        if not any(_used_between(r, earlier, op) for r in first.results):
            journal.rewriting(op)
            _fuse(first, second, journal, at=op)
            return True
        if not _needs_values_after(op, earlier):
            journal.rewriting(op, anchor=earlier)
            _fuse(first, second, journal, at=earlier)
            return True
    return False


_SHARED_FOR_NOTHING = frozenset({"arith.constant", "tensor.empty", "linalg.fill", RANGE_PRODUCT})


def fusion_candidates(op: ir.Operation) -> list[ir.Operation]:
    """The loops before `op` in its block that read a value `op` reads, first first: a value from outside
    both that is computed (not a constant, an empty tensor, a fill or a range)."""
    found: dict[int, ir.Operation] = {}
    seen: set[int] = set()
    for value in captured_values(op):
        producer = defining_op(value)
        if producer is not None and (producer.name in _SHARED_FOR_NOTHING or op_id(producer) in seen):
            continue
        if producer is not None:
            seen.add(op_id(producer))
        if not isinstance(value.type, ir.RankedTensorType):
            continue
        for other in _lift_all([as_op(use.owner) for use in value.uses], op.block):
            if other.name == LOOP:
                found.setdefault(op_id(other), other)
    return _earlier_in_block(op, found.values())


def _depends_on(op: ir.Operation, earlier: ir.Operation) -> bool:
    """Does `op` use (through ops of the same block) a result of `earlier`? Walks forward from `earlier`'s
    results through their users, lifted to the block, up to `op` (a user after `op` cannot lead to it)."""
    block = op.block
    stack, seen = [earlier], {op_id(earlier)}
    while stack:
        current = stack.pop()
        for result in current.results:
            for use in result.uses:
                user = _lift(as_op(use.owner), block)
                if user is None:
                    continue
                if user == op:
                    return True
                if op.is_before_in_block(user) or op_id(user) in seen:
                    continue
                seen.add(op_id(user))
                stack.append(user)
    return False


def _lift(op: ir.Operation, block: ir.Block) -> ir.Operation | None:
    """`op`'s ancestor (or itself) in `block`, None when `op` is not inside `block`."""
    while op.block != block:
        parent = op.parent
        if parent is None or as_op(parent).name == "builtin.module":
            return None
        op = as_op(parent)
    return op


def _used_between(value: ir.Value, first: ir.Operation, second: ir.Operation) -> bool:
    for use in value.uses:
        user = as_op(use.owner)
        while user.block != first.block:
            user = as_op(user.parent)
        if first.is_before_in_block(user) and user.is_before_in_block(second):
            return True
    return False


def _needs_values_after(op: ir.Operation, earlier: ir.Operation) -> bool:
    for value in captured_values(op):
        owner = defining_op(value)
        if owner is not None and owner.block == op.block and earlier.is_before_in_block(owner):
            return True
    return False


def _fuse(first: LoopOp, second: LoopOp, journal: Journal, *, at: ir.Operation) -> None:
    loc = first.operation.location
    with ir.InsertionPoint(at), loc:
        fused = loop([r.type for r in first.results + second.results], mesh=first.mesh, action=first.action, range=first.range)
        _inherit_provenance(fused.operation, first, f"fusion of sibling loops over {', '.join(first.range.axes)}")
    with ir.InsertionPoint(fused.body), loc:
        anchor = yield_([])
    yielded = (_move_body(first, fused.range_arg, journal, before=anchor)
               + _move_body(second, fused.range_arg, journal, before=anchor))
    with ir.InsertionPoint(anchor), loc:
        yield_(yielded)
    anchor.erase()
    for old, new in zip(first.results + second.results, fused.results):
        old.replace_all_uses_with(new)
    journal.erase(first.operation)
    journal.erase(second.operation)


# ----------------------------------------------------------------------------- hoisting


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


LAWS = (
    eliminate_dead,
    merge_duplicate_slice,
    merge_duplicate_loop,
    order_slices,
    compose_slices,
    deforest,
    commute_slice_into_loop,
    push_slice_into_producer,
    pull_op_into_loop,
    hoist_invariant,
)
# Fusion runs only when no other law applies, so it sees the loops propagation settled on.
LATE_LAWS = (fuse_sibling_loops,)
