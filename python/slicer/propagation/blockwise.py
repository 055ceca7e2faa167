"""Laws that make an op compute block-wise, as the rule table says it can: backward (a block of an op's
result is the op on blocks of its operands) and forward (an op consuming a tile loop's result becomes a loop)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, func, linalg, tensor

from slicer.core.dtypes import byte_size
from slicer.core.errors import Located, PassFailure
from slicer.core.linalg_facts import is_linalg_op, reshape_kept_dims
from slicer.core.mesh import block_size
from slicer.core.names import (
    BLOCKED_ATTR,
    DIALECT_PREFIX,
    LINALG_PREFIX,
    SLICE,
    STATIC_OUTPUT_SHAPE_ATTR,
    STATIC_SIZES_ATTR,
    VALUE_ATTR,
    YIELD,
)
from slicer.core.operations import as_op, defining_op
from slicer.core.source_lines import source_line
from slicer.dialect import LoopOp, SliceOp, TileAction, loop, slice_, with_dim, yield_
from slicer.rules import NoRule, RuleOutcome, kept_dims, rule_operands

from .gather_blocks import mask_lookup, range_starts, read_table_blocks, shift_index
from .ir_utils import enclosing_axes, is_zero_tensor, op_id, result_index
from .journal import Journal
from .loop_facts import (
    describe,
    inherit_provenance,
    lift,
    outcome_kind,
    priority,
    tactic_name,
    tile_loop_of,
    tile_outcome,
)


def push_slice_into_producer(op: ir.Operation, journal: Journal) -> bool:
    if op.name != SLICE:
        return False
    view = SliceOp(op)
    producer = defining_op(view.source)
    if producer is None or producer.name.startswith(DIALECT_PREFIX) or producer.name == func.CallOp.OPERATION_NAME:
        return False
    rng = view.range
    try:
        outcome = tile_outcome(producer, result=result_index(view.source), dim=view.dim)
    except NoRule:
        return False
    if not outcome.ok or outcome_kind(outcome) != "tile":
        return False
    if _indivisible(producer, outcome, rng.size):
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
    holder = lift(user, op.block)
    return holder is not None and holder != op and op.is_before_in_block(holder)


def _result_dims(outcome: RuleOutcome) -> dict[int, int]:
    """Result index -> dim the result is tiled on (tile outcomes only)."""
    return {r: a.dim for r, a in enumerate(outcome.actions) if isinstance(a, TileAction)}


def _indivisible(op: ir.Operation, outcome: RuleOutcome, size: int, devices: str = "") -> str:
    """Why a dim the outcome cuts cannot be cut in `size` blocks ("" when every one can). A dynamic dim is never
    cut (programs with dynamic dims are partitioned along their static ones). A static size that `size` does
    not divide is cut only in linalg ops (their dims are loop dims, so a padded block, docs/partition.md
    "Uneven shapes", is the same loop over fewer valid rows; the partitioner masks reductions over them) and in
    reshapes that leave the dim alone; other ops (reshapes of that dim, slices) would mix padding into real
    rows."""
    kept = reshape_kept_dims(op)  # a reshape leaving a dim alone keeps its padded blocks as they are
    operands = rule_operands(op)  # the op's operands, then the tables its body reads (rules/gathers.py)
    cuts = [("operand", index, dim, operands[index].type) for index, dim in outcome.slices]
    cuts += [("result", index, dim, op.results[index].type) for index, dim in _result_dims(outcome).items()]
    for kind, index, dim, type_ in cuts:
        type_ = ir.RankedTensorType(type_)
        if type_.is_dynamic_dim(dim):
            return f"{kind} #{index} dim {dim} of '{op.name}' is dynamic"
        uneven_ok = is_linalg_op(op) or (kept is not None and dim in (kept if kind == "operand" else kept.values()))
        if type_.shape[dim] % size and not uneven_ok:
            return (f"{kind} #{index} dim {dim} of '{op.name}' has size {type_.shape[dim]}, which {devices or size} "
                    "does not divide")
    return ""


def _blockwise_clone(op: ir.Operation, outcome: RuleOutcome, range_value: ir.Value, size: int, ip) -> ir.Operation:
    """A copy of `op` computing one block: sliced operands (and tables its body reads by index), block-typed
    results; a masked lookup for a gather tiled along its gathered dim (`gather_blocks`)."""
    slices = outcome.slice_map
    everything = rule_operands(op)
    operands = [slice_(v, range_value, slices[i]) if i in slices else v for i, v in enumerate(everything)]
    tables = {everything[i]: operands[i] for i in range(len(op.operands), len(everything)) if i in slices}
    starts = shift_starts = None
    if outcome.gather is not None:
        table, dim = outcome.gather
        starts = range_starts(ir.RankedTensorType(everything[table].type).shape[dim], size, range_value)
    if outcome.shift is not None:
        shift_starts = range_starts(outcome.shift[1], size, range_value)
    if outcome_kind(outcome) == "sum":
        for index in outcome.zero_inits:
            operands[index] = _zeros(ir.RankedTensorType(op.operands[index].type))
    clone = as_op(op.clone(ip=ip))
    if BLOCKED_ATTR in clone.attributes:  # computed block-wise after all
        del clone.attributes[BLOCKED_ATTR]
    for index, value in enumerate(operands[:len(op.operands)]):
        clone.operands[index] = value
    read_table_blocks(clone, tables)
    if starts is not None:
        mask_lookup(clone, operands[outcome.gather[0]], outcome.gather[1], starts)
    if shift_starts is not None:
        shift_index(clone, outcome.shift[0], shift_starts)
    for index, dim in _result_dims(outcome).items():
        old = ir.RankedTensorType(op.results[index].type)
        clone.results[index].set_type(with_dim(old, dim, block_size(old.shape[dim], size)))
    _update_static_shapes(clone, op)
    return clone


def _update_static_shapes(op: ir.Operation, original: ir.Operation) -> None:
    """Ops that repeat their shapes in attributes get them updated to the block's shapes (`op` is the
    block-wise copy of `original`)."""
    if op.name == tensor.ExpandShapeOp.OPERATION_NAME:
        op.attributes[STATIC_OUTPUT_SHAPE_ATTR] = ir.DenseI64ArrayAttr.get(list(op.results[0].type.shape))
    elif op.name in (tensor.ExtractSliceOp.OPERATION_NAME, tensor.InsertSliceOp.OPERATION_NAME):
        # The slice's sizes, the dims a rank-reducing slice drops (unit sizes) included.
        part = 0 if op.name == tensor.InsertSliceOp.OPERATION_NAME else None
        old = original.operands[part].type if part is not None else original.results[0].type
        new = op.operands[part].type if part is not None else op.results[0].type
        sizes = list(ir.DenseI64ArrayAttr(original.attributes[STATIC_SIZES_ATTR]))
        for r, d in enumerate(kept_dims(original, old)):
            sizes[d] = new.shape[r]
        op.attributes[STATIC_SIZES_ATTR] = ir.DenseI64ArrayAttr.get(sizes)
    elif op.name == arith.ConstantOp.OPERATION_NAME and isinstance(op.results[0].type, ir.RankedTensorType):
        splat = ir.DenseElementsAttr(op.attributes[VALUE_ATTR]).get_splat_value()
        op.attributes[VALUE_ATTR] = ir.DenseElementsAttr.get_splat(op.results[0].type, splat)


def _zeros(type_: ir.RankedTensorType) -> ir.Value:
    element = type_.element_type
    zero = arith.constant(element, 0.0 if isinstance(element, ir.FloatType) else 0)
    return linalg.fill(zero, outs=[tensor.empty(type_.shape, element)])


@dataclass(frozen=True)
class Candidate:
    operand: int
    producer: LoopOp
    dim: int


def forward_candidates(op: ir.Operation) -> list[Candidate]:
    """Operands of `op` (and tables its body reads by index, `slicer.rules.rule_operands`) produced by tile
    loops, earliest tactic first: a tile loop's result, or a device's own block of one
    (`slice(loop_tile<d>_A(r -> M(r)), d, r)`) whose body yields the result of an inner tile loop `M` over
    other axes (`own_block_tiling`)."""
    found = []
    for index, value in enumerate(rule_operands(op)):
        loop_and_result = tile_loop_of(value) or own_block_tiling(value)
        if loop_and_result is not None:
            producer, _ = loop_and_result
            found.append(Candidate(index, producer, producer.action.dim))
    return sorted(found, key=lambda c: (priority(c.producer), c.operand))


def own_block_tiling(value: ir.Value) -> tuple[LoopOp, int] | None:
    """(inner loop, result index) when `value` is `slice(L, d, r)`, a device's own block of the result of a
    tile<d> loop `L` (`r` over `L`'s axes, inside a loop over them), and `L`'s body yields for that result the
    result of a tile loop `M` over other axes: the block is tiled as `M` tiles it.

    A value of a 2-D loop nest with several consumers keeps its loops (deforestation gives a body away to one
    consumer only), and a consumer in another loop over the outer axes reads its own block through a slice.
    Without looking through the slice that consumer would not see the inner tiling and compute replicated
    over the inner axes, each block gathered first (data + Megatron: the heads of Q, K and V all-gathered over
    y for every use in the backward pass); with it, the consumer is pulled into a loop over the inner axes
    like a consumer of `M` itself (its operand sliced again: the device's own block, no communication)."""
    owner = defining_op(value)
    if owner is None or owner.name != SLICE:
        return None
    view = SliceOp(owner)
    outer = tile_loop_of(view.source)
    if outer is None:
        return None
    loop_op, index = outer
    if view.dim != loop_op.action.dim or view.range_value.type != loop_op.range_arg.type:
        return None
    terminator = loop_op.terminator
    if terminator is None or terminator.name != YIELD:
        return None
    inner = tile_loop_of(terminator.operands[index])
    if inner is None or as_op(inner[0].operation).block != loop_op.body:
        return None
    if set(inner[0].range.axes) & set(loop_op.range.axes):
        return None
    return inner


def preferred_order(op: ir.Operation, candidates: list[Candidate]) -> list[Candidate]:
    """`candidates` with those over the same axes reordered (each group keeps its places in the list), earliest
    tactic first among equals. A later loop goes before the group's first when it keeps every operand tiled
    over those axes distributed (a conflicting one is sliced: it moves by all_to_all, nothing is gathered),
    tiles `op`'s result on a dim a reader takes tiled over those axes, and moves no more bytes than the first
    (whose partial sums count as reduced); one that takes an operand in a block another op already takes
    (the partitioner reuses that copy) before the others. The combine of a mixture of experts,
    `einsum("gsec,egcd->gsd")` with groups and experts tiled over one axis, so keeps its result group-tiled
    (the experts' outputs come back by all_to_all) instead of summing over the experts, and the backward's
    `einsum("gsd,egcd->gsec")` takes the experts' outputs the combine moved (docs/tactics.md)."""
    groups: dict[frozenset[str], list[int]] = {}
    for index, candidate in enumerate(candidates):
        groups.setdefault(frozenset(candidate.producer.range.axes), []).append(index)
    ordered = list(candidates)
    for axes, places in groups.items():
        if len(places) < 2:
            continue
        tiled = {candidates[i].operand for i in places}
        first = _moved_bytes(op, candidates[places[0]], tiled)
        ranks = {i: _rank(op, candidates[i], tiled, axes, first) for i in places}
        for place, i in zip(places, sorted(places, key=lambda i: (ranks[i], i))):
            ordered[place] = candidates[i]
    return ordered


def _rank(op: ir.Operation, candidate: Candidate, tiled: set[int], axes: frozenset[str], budget: int | None) -> int:
    """0, 1 or 2 as `preferred_order` ranks the candidate's loop at `op` (`tiled`: the operands tiled over
    `axes`; `budget`: the bytes the group's first loop moves, None when unknown)."""
    outcome = _outcome(op, candidate.operand, candidate.dim)
    if outcome is None or any(not isinstance(a, TileAction) for a in outcome.actions):
        return 2
    if not tiled <= set(outcome.slice_map):
        return 2
    if not any(_read_tiled(op.results[r], a.dim, axes, _READ_DEPTH) for r, a in enumerate(outcome.actions)):
        return 2
    moved = _moved_bytes(op, candidate, tiled)
    if moved is None or budget is None or moved > budget:
        return 2
    operands = rule_operands(op)
    range_type = candidate.producer.range_arg.type
    sliced = outcome.slice_map
    return 0 if any(_taken_block(operands[i], sliced[i], range_type) for i in tiled - {candidate.operand}) else 1


def _moved_bytes(op: ir.Operation, candidate: Candidate, tiled: set[int]) -> int | None:
    """Bytes the candidate's loop at `op` moves, in whole-value bytes (a device's share of each is the same
    fraction): an operand in `tiled` sliced on another dim than its own tiling moves its block (all_to_all, a
    block another op already takes is free), one not sliced is gathered whole, partial sums of `op`'s
    results are reduced whole. None when `op` has no rule for it."""
    outcome = _outcome(op, candidate.operand, candidate.dim)
    if outcome is None:
        return None
    operands, sliced = rule_operands(op), outcome.slice_map
    size = candidate.producer.range.size
    moved = 0
    for index in tiled - {candidate.operand}:
        own = tile_loop_of(operands[index]) or own_block_tiling(operands[index])
        if index not in sliced:
            moved += _bytes(operands[index].type)
        elif own is not None and own[0].action.dim != sliced[index] and \
                not _taken_block(operands[index], sliced[index], candidate.producer.range_arg.type):
            moved += _bytes(operands[index].type) // size
    if any(not isinstance(a, TileAction) for a in outcome.actions):
        moved += sum(_bytes(result.type) for result in op.results)
    return moved


def _bytes(type_: ir.Type) -> int:
    """Bytes of a tensor of `type_` (a byte per element of an unknown type)."""
    shaped = ir.RankedTensorType(type_)
    return math.prod(shaped.shape) * (byte_size(str(shaped.element_type)) or 1)


_READ_DEPTH = 3
"""How many readers deep `_read_tiled` looks through ops that only carry a tiling on (reshapes, elementwise)."""


def _read_tiled(value: ir.Value, dim: int, axes: frozenset[str], depth: int) -> bool:
    """Does a reader of `value` take it tiled on `dim` over `axes`: a slice over them, or an op that another
    operand tiled over them by a loop would make slice `value` on `dim` (looking `depth` readers deep through
    ops that would tile their result from `value`'s tiling)?"""
    for use in value.uses:
        reader, position = as_op(use.owner), use.operand_number
        if reader.name == SLICE:
            view = SliceOp(reader)
            if view.dim == dim and view.range is not None and frozenset(view.range.axes) == axes:
                return True
            continue
        if reader.name.startswith(DIALECT_PREFIX) or reader.name in (func.ReturnOp.OPERATION_NAME, YIELD):
            continue
        for other in forward_candidates(reader):
            if other.operand != position and frozenset(other.producer.range.axes) == axes:
                outcome = _outcome(reader, other.operand, other.dim)
                if outcome is not None and outcome.slice_map.get(position) == dim:
                    return True
        outcome = _outcome(reader, position, dim) if depth > 1 else None
        if outcome is not None and all(isinstance(a, TileAction) for a in outcome.actions):
            if any(_read_tiled(reader.results[r], a.dim, axes, depth - 1) for r, a in enumerate(outcome.actions)):
                return True
    return False


def _outcome(op: ir.Operation, operand: int, dim: int) -> RuleOutcome | None:
    """The rule's outcome of tiling `op`'s operand `operand` on `dim`, None when there is no rule or it blocks."""
    try:
        outcome = tile_outcome(op, operand=operand, dim=dim)
    except NoRule:
        return None
    return outcome if outcome.ok else None


def _taken_block(value: ir.Value, dim: int, range_type: ir.Type) -> bool:
    """Does an op already take a block of `value`, a tile loop's result tiled on another dim, on `dim` over
    the axes of `range_type` (a `slicer.slice`)?"""
    producer = tile_loop_of(value)
    if producer is None or producer[0].action.dim == dim:
        return False
    for use in value.uses:
        user = as_op(use.owner)
        if user.name == SLICE and SliceOp(user).dim == dim and SliceOp(user).range_value.type == range_type:
            return True
    return False


def pull_op_into_loop(op: ir.Operation, journal: Journal) -> bool:
    if op.name.startswith(DIALECT_PREFIX) or op.name in (func.ReturnOp.OPERATION_NAME, YIELD) or not op.results:
        return False
    if op.parent is not None and op.parent.name.startswith(LINALG_PREFIX):
        return False  # scalar code of a linalg body: the linalg op is pulled (its rule reads the body)
    candidates = preferred_order(op, forward_candidates(op))
    if not candidates:
        return False
    busy_axes = enclosing_axes(op)
    for candidate in candidates:
        rng = candidate.producer.range
        if busy_axes & set(rng.axes):
            continue  # already partitioned over these axes here: a conflict, reported at the end
        try:
            outcome = tile_outcome(op, operand=candidate.operand, dim=candidate.dim)
        except NoRule as exc:
            raise PassFailure(Located(op.location, _no_rule_message(op, candidate, exc))) from None
        if not outcome.ok:
            _blocked(op, f"operand #{candidate.operand} dim {candidate.dim} {outcome.blocked}", candidate, journal)
            continue
        if len(set(outcome.actions)) > 1:
            _blocked(op, f"its results would be rebuilt with different actions {outcome.actions}", candidate, journal)
            continue
        reason = _indivisible(op, outcome, rng.size, f"{','.join(rng.axes)}={rng.size}")
        if reason:
            _blocked(op, reason, candidate, journal)
            continue
        journal.rewriting(op)
        _make_loop(op, candidate, outcome, journal)
        return True
    return False


def _blocked(op: ir.Operation, reason: str, candidate: Candidate, journal: Journal) -> None:
    """Record that the tiling of `candidate` could not enter `op`, in the journal and on the op
    (`slicer.blocked`, shown by explain and quoted by the partitioner if the op then gathers the value)."""
    rng = candidate.producer.range
    note = f"the tiling over {','.join(rng.axes)} from {tactic_name(candidate.producer)} stops here: {reason}"
    journal.blocked.append((op, note))
    op.attributes[BLOCKED_ATTR] = ir.StringAttr.get(note)


def _no_rule_message(op: ir.Operation, candidate, exc: NoRule) -> str:
    """Why a tiling stops at `op`, and what to change: for an op of an imported model (its location is a line
    of Python), in the model's terms (the line, the tactic's argument); for MLIR text, in the program's."""
    axes, tactic = ", ".join(candidate.producer.range.axes), tactic_name(candidate.producer)
    what = (f"cannot propagate the tiling of operand #{candidate.operand} dim {candidate.dim} (over {axes}, from "
            f"{tactic}) through '{op.name}'")
    line = source_line(op.location)
    if line is None:
        return (f"{what}: {exc}. Or replicate the operand before this op (slicer.Replicate / an all-empty "
                "slicer.annotate)")
    return (f"{what}, which the model computes at {line}: Slicer cannot partition that op ({op.name} has no "
            f"propagation rule). Change the tactics so the values this line reads stay whole (drop or change "
            f"{tactic}, or add slicer.Replicate for the argument it reads), or write that line with ops that "
            "partition (elementwise ops, matmuls, reductions)")


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
    rule = (f"forward: {describe(op, outcome)} (from operand #{candidate.operand} dim {candidate.dim} tiled over "
            f"{', '.join(rng.axes)})")
    results: list[ir.Value | None] = [None] * len(op.results)
    with ir.InsertionPoint(op), op.location:
        for group in _same_type_groups(op.results):
            new_loop = loop([op.results[i].type for i in group], mesh=producer.mesh, action=action, range=rng)
            inherit_provenance(new_loop.operation, producer, rule)
            with ir.InsertionPoint(new_loop.body):
                clone = _blockwise_clone(op, outcome, new_loop.range_arg, rng.size, ir.InsertionPoint(new_loop.body))
                yield_([clone.results[i] for i in group])
            for i, value in zip(group, new_loop.results):
                results[i] = value
        if outcome_kind(outcome) == "sum":
            # The loop summed blocks computed from zeros; add the real initial value once.
            for index in outcome.zero_inits:
                init = op.operands[index]
                if not is_zero_tensor(init):
                    r = index - (len(op.operands) - len(op.results))
                    results[r] = linalg.add(results[r], init,
                                            outs=[tensor.empty(ir.RankedTensorType(init.type).shape,
                                                               ir.RankedTensorType(init.type).element_type)])
    for old, new in zip(op.results, results):
        old.replace_all_uses_with(new)
    journal.erase(op)
