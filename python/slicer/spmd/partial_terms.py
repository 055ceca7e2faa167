"""Partial sums added up before they are reduced: one all_reduce of a sum instead of one per term.

A partial sum over axes A is a value every device of a group over A holds a term of (a `sum` loop's result).
A plain op reading it whole reduces it first (an all_reduce). When an elementwise op adds several of them up,
the sum of the terms is itself a partial sum, reduced once where it is read whole (`partial_terms`):
Megatron's backward adds `dq Wq + dk Wk + dv Wv`; gradient clipping adds the sums of squares of every
gradient. Two cases more are handled here:

- *replicated terms* (`Terms.first`): a value every device holds whole, added to partial sums (the sum of
  squares of a replicated bias under Megatron, among sharded weights' partial ones), is a partial sum held by
  the group's first device alone (zeros on the others: `first_device_term`, a local select, no communication),
  when it is read only as a term (`slicer.rules.constant_term_inputs`);
- *a sum inside a longer computation* (`split_linear_sum`): elementwise fusion puts the sum into the op that
  goes on computing with it (`sqrt(a + b + c)`): the op is split into one computing the sum (its partial
  inputs read only through it, a linear combination: `slicer.rules.linear_at`) and one computing the rest from
  that sum reduced (and the op's other inputs).
The sum is a partial sum over all the axes its terms are partial over; a term partial over fewer of them (a
replicated bias's gradient under data parallel + Megatron: over x, the others over x and y) is held by the first
device over the others (`Terms.first`). Only where it saves reductions: two or more partial inputs, fewer of them
read by other ops too (those are reduced anyway).
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, linalg, tensor

from slicer.core.linalg_facts import has_operand_segments, indexing_maps, input_count, is_linalg_op
from slicer.redistribution import DistType
from slicer.rules import constant_term_inputs, linear_at

from .dist_types import tensor_shape
from .emit_collectives import PlanEmitter


@dataclass(frozen=True)
class Terms:
    """How an op adds partial sums up into a partial sum over `axes`: `kept` operands taken as they are (partial
    sums over `axes`), `first` ones (operand, axes B) taken as partial sums over B too, held by the first device
    of each group over B (replicated ones, and partial sums over fewer axes than `axes`)."""

    kept: frozenset[int]
    first: tuple[tuple[int, tuple[str, ...]], ...]
    axes: tuple[str, ...]


NONE = Terms(frozenset(), (), ())


def _partial_inputs(p, op: ir.Operation, context: frozenset[str]) -> dict[int, object] | None:
    """The inputs of `op` that are partial sums, when they may be added up as terms: of the result's shape, not
    tiled, not over axes of the context; None when some is not so (or `op` has not one result)."""
    if not is_linalg_op(op) or not has_operand_segments(op) or len(op.results) != 1:
        return None
    shape = tensor_shape(op.results[0])
    if shape is None:
        return None
    terms = {}
    for index in range(input_count(op)):
        entry = p.lookup(op.operands[index])
        if entry is not None and entry.type.partial:
            terms[index] = entry
    for entry in terms.values():
        if (entry.type.shape != shape or any(entry.type.dims) or not entry.context <= context
                or set(entry.type.partial) & context):
            return None
    return terms


def _saves(op: ir.Operation, terms) -> bool:
    """Does adding `terms` up save reductions? Two or more, fewer of them read by other ops too."""
    if len(terms) < 2:
        return False
    reused = sum(1 for i in terms if any(use.owner.operation != op for use in op.operands[i].uses))
    return reused < len(terms)


def _first_terms(p, op: ir.Operation, value: ir.Value, terms, context: frozenset[str]) -> frozenset[int] | None:
    """The replicated inputs to take as first-device partial sums so that `value` (a value of `op`'s body) is
    linear in them and `terms` (empty: it already is); None when no such choice exists."""
    if linear_at(op, value, set(terms)) is None:
        return frozenset()
    first = constant_term_inputs(op, value, set(terms))
    if not first:
        return None
    for index in first:
        entry = p.lookup(op.operands[index])
        if entry is None or entry.type.partial or any(entry.type.dims) or not entry.context <= context:
            return None
    return first if linear_at(op, value, set(terms) | first) is None else None


def _terms(p, op: ir.Operation, value: ir.Value, terms: dict, context: frozenset[str]) -> Terms | None:
    """The `Terms` making `value` (a value of `op`'s body) a partial sum of `terms` and replicated inputs,
    over all the axes the terms are partial over, or None."""
    replicated = _first_terms(p, op, value, terms, context)
    if replicated is None:
        return None
    union = {a for entry in terms.values() for a in entry.type.partial}
    some = next(iter(terms.values())).type
    axes = p.canon(DistType(some.shape, some.dims, tuple(sorted(union))), op.location).partial
    if set(axes) & context:
        return None
    kept = frozenset(i for i, entry in terms.items() if set(entry.type.partial) == union)
    first = [(i, tuple(a for a in axes if a not in terms[i].type.partial)) for i in sorted(set(terms) - kept)]
    first += [(i, axes) for i in sorted(replicated)]
    return Terms(kept, tuple(first), axes)


def partial_terms(p, op: ir.Operation, context: frozenset[str]) -> Terms:
    """How `op` adds partial sums up (`Terms`), or `NONE`: every operand is then converted to replicated.
    `p` is the function's `spmd.conversion.PartitionState`."""
    terms = _partial_inputs(p, op, context)
    if not terms or not _saves(op, terms):
        return NONE
    body = op.regions[0].blocks[0]
    found = _terms(p, op, body.operations[len(body.operations) - 1].operands[0], terms, context)
    return NONE if found is None else found


def first_device_term(p, value: ir.Value, axes: tuple[str, ...], before: ir.Operation) -> ir.Value:
    """`value` (held whole by every device) as a partial sum over `axes`: itself on the first device of each
    group over `axes`, zeros on the others (their sum is `value`, exactly)."""
    type_ = ir.RankedTensorType(value.type)
    element = type_.element_type
    with ir.InsertionPoint(before), ir.Location.name(f"'{before.name}' adds it once: held by the first device of "
                                                     f"[{','.join(axes)}]", childLoc=before.location):
        index = PlanEmitter(p.mesh, p.grid, p.coords).group_index(axes)
        first = arith.cmpi(arith.CmpIPredicate.eq, index, arith.constant(ir.IndexType.get(), 0))
        zero = arith.constant(element, 0.0 if isinstance(element, ir.FloatType) else 0)
        zeros = linalg.fill(zero, outs=[tensor.empty(type_.shape, element)])
        return arith.select(first, value, zeros)


def split_linear_sum(p, op: ir.Operation, context: frozenset[str]) -> tuple[ir.Operation, ir.Operation] | None:
    """(the sum, the rest) when `op` reads its partial inputs only through one linear combination `V` of them
    that it computes on (see the module docstring); `op` is then replaced by two copies: the first yields `V`
    (its partial inputs added up as terms), the second reads it (reduced, where the first of those inputs was)
    instead of computing it. None, nothing changed, otherwise (no partial inputs to add up, or `op` yields a
    linear combination of them already: `partial_terms`)."""
    terms = _partial_inputs(p, op, context)
    if not terms or not _saves(op, terms):
        return None
    body = op.regions[0].blocks[0]
    used = [i for i in terms if len(list(body.arguments[i].uses))]
    if len(used) < 2:
        return None
    found = _sum_of(body, {body.arguments[i] for i in terms})
    if found is None:
        return None
    position, value = found
    out_map = indexing_maps(op)[input_count(op)]
    slot = next((i for i in sorted(terms) if indexing_maps(op)[i] == out_map), None)
    if (slot is None or value.type != body.arguments[input_count(op)].type
            or _terms(p, op, value, terms, context) is None):
        return None
    with ir.InsertionPoint(op):
        total, rest = op.clone(), op.clone()
    total_body, rest_body = total.regions[0].blocks[0], rest.regions[0].blocks[0]
    total_yield = list(total_body.operations)[-1]
    total_yield.operands[0] = list(total_body.operations)[position].results[0]
    list(rest_body.operations)[position].results[0].replace_all_uses_with(rest_body.arguments[slot])
    for copy in (total_body, rest_body):
        _erase_unused(copy)
    for index in terms:
        rest.operands[index] = total.results[0]
    op.results[0].replace_all_uses_with(rest.results[0])
    op.erase()
    return total, rest


def _sum_of(body: ir.Block, partial: set) -> tuple[int, ir.Value] | None:
    """(position in `body`, value) of the first value computed from the `partial` block arguments through which
    alone all of them reach the rest of the body, when it is not the yielded value; else None."""
    reading: set = set(partial)  # values computed from a partial argument
    ops = list(body.operations)
    for position, inner in enumerate(ops[:-1]):
        inner = inner.operation
        if len(inner.results) != 1 or not any(v in reading for v in inner.operands):
            continue
        value = inner.results[0]
        reading.add(value)
        inside = _reading_slice(value, reading, body)
        closed = all(use.owner.operation in inside for v in partial for use in v.uses)
        closed = closed and all(use.owner.operation in inside for o in inside if o != inner.operation
                                for use in o.results[0].uses)
        if closed:
            return None if value in ops[-1].operands else (position, value)
    return None


def _reading_slice(value: ir.Value, reading: set, body: ir.Block) -> list[ir.Operation]:
    """The ops of `body` computing `value` from values in `reading` (its op included)."""
    found, stack = [], [value]
    while stack:
        current = stack.pop()
        owner = current.owner
        if isinstance(owner, ir.Block) or owner.operation.block != body:
            continue
        op = owner.operation
        if op in found:
            continue
        found.append(op)
        stack += [v for v in op.operands if v in reading]
    return found


def _erase_unused(body: ir.Block) -> None:
    """Erase the ops of `body` (a linalg body: pure scalar ops) whose results nothing reads, last first."""
    for inner in reversed(list(body.operations)[:-1]):
        if all(not len(list(result.uses)) for result in inner.results):
            inner.erase()
