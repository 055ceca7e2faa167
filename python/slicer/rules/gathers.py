"""Gathers by index: the rule of a `linalg.generic` whose body reads a captured tensor with `tensor.extract`.

torch-mlir imports embedding lookups (`nn.Embedding`, `aten.embedding`, `index_select`) and the reshapes
around `view_as_complex` (complex RoPE) as a generic whose body reads a tensor defined outside it (the
*table*) at computed positions:

    %e = linalg.generic ins(%idx) outs(%init) { ^bb0(%i: i64, %o: f32):
           %row = arith.index_cast %i;  %col = linalg.index 2
           %v = tensor.extract %table[%row, %col];  linalg.yield %v }

Details: docs/module-notes.md, `rules/gathers.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlir import ir
from mlir.dialects import affine, arith, cf, linalg, tensor

from slicer.core.names import DIM_ATTR
from slicer.core.operations import defining_op

from .table import DimUse

INDEX_CASTS = frozenset({arith.IndexCastOp.OPERATION_NAME, arith.IndexCastUIOp.OPERATION_NAME,
                         arith.ExtSIOp.OPERATION_NAME, arith.ExtUIOp.OPERATION_NAME, arith.TruncIOp.OPERATION_NAME})


@dataclass(frozen=True)
class TableUses:
    """What the body's reads make of its captured tables: per table its dim uses, the (table, dim) pairs a
    masked lookup may tile (as rule operand numbers), and the loops whose `linalg.index` reads only index
    tables along dims that walk them."""

    tables: tuple[ir.Value, ...]
    uses: tuple[tuple[DimUse, ...], ...]
    gathers: tuple[tuple[int, int], ...]
    freed_loops: frozenset[int]


def gathered_tables(op: ir.Operation) -> list[ir.Value]:
    """The ranked tensors a linalg op's body reads with `tensor.extract` from outside the op, in order of
    first read (the rule's operands after the op's own)."""
    if not len(op.regions) or not len(op.regions[0].blocks):
        return []
    found: list[ir.Value] = []
    for inner in op.regions[0].blocks[0].operations:
        inner = inner.operation
        if inner.name != tensor.ExtractOp.OPERATION_NAME:
            continue
        source = inner.operands[0]
        if _defined_outside(source, op) and not any(source == seen for seen in found):
            found.append(source)
    return found


def lookups_by_data(op: ir.Operation) -> tuple[list[ir.Operation], bool]:
    """The body's `tensor.extract` reads of captured tables at a position computed from the op's input
    elements (lookups by data: an embedding's token ids), in body order; and whether the body is those
    lookups alone (it yields them as they are, `_yields_reads`)."""
    tables = gathered_tables(op)
    if not tables:
        return [], False
    body = op.regions[0].blocks[0]
    count = len(op.operands) - len(op.results)
    inputs = list(body.arguments)[:count]
    reads = [o.operation for o in body.operations if o.operation.name == tensor.ExtractOp.OPERATION_NAME
             and any(o.operation.operands[0] == t for t in tables)
             and any(_reaches_inputs(p, inputs) for p in list(o.operation.operands)[1:])]
    return reads, bool(reads) and _yields_reads(body, reads, count)


def rule_operands(op: ir.Operation) -> list[ir.Value]:
    """The values a rule's operand numbers name: the op's operands, then its gathered tables."""
    operands = list(op.operands)
    if op.name == linalg.GenericOp.OPERATION_NAME:
        operands += gathered_tables(op)
    return operands


def table_uses(op: ir.Operation, loop_sizes: list[int | None]) -> TableUses:
    """The dim uses of `op`'s gathered tables (see the module docstring); `loop_sizes[d]` is loop `d`'s static
    trip count (None if unknown)."""
    tables = gathered_tables(op)
    body = op.regions[0].blocks[0]
    num_inputs = len(op.operands) - len(op.results)
    inputs = list(body.arguments)[:num_inputs]
    first = len(op.operands)
    uses, gathers, excused = [], [], dict[Any, Any]()
    for t, table in enumerate(tables):
        reads = [o.operation for o in body.operations
                 if o.operation.name == tensor.ExtractOp.OPERATION_NAME and o.operation.operands[0] == table]
        rank = ir.RankedTensorType(table.type).rank
        dims = []
        for j in range(rank):
            extent = ir.RankedTensorType(table.type).shape[j]
            kinds = {_classify(read.operands[1 + j], extent, loop_sizes, inputs) for read in reads}
            use = kinds.pop() if len(kinds) == 1 else DimUse.blocked("is read at positions of different kinds "
                                                                    "by the body's tensor.extract ops")
            dims.append(use)
            if use.loop is not None:
                for read in reads:
                    excused.setdefault(use.loop, []).append(read.operands[1 + j])
        uses.append(tuple(dims))
        gathered = [j for j, use in enumerate(dims) if use == _GATHERED]
        if len(gathered) == 1 and _yields_reads(body, reads, num_inputs):
            gathers.append((first + t, gathered[0]))
    freed = frozenset(d for d, values in excused.items() if _only_positions(body, d, values))
    return TableUses(tuple(tables), tuple(uses), tuple(gathers), freed)


_GATHERED = DimUse.blocked("is indexed by data (a gather by index): the positions read are computed from the "
                           "op's inputs")


def _classify(position: ir.Value, extent: int, loop_sizes: list[int | None], inputs: list) -> DimUse:
    """The use of a table dim of size `extent` read at `position`."""
    loop = _index_loop(position)
    if loop is not None:
        if loop >= len(loop_sizes) or loop_sizes[loop] != extent:
            return DimUse.blocked(f"is read at linalg.index {loop}, whose loop does not span the dim (of size "
                                  f"{extent}): its blocks would not be the table's")
        return DimUse.walks(loop)
    owner = defining_op(position)
    if owner is not None and owner.name == affine.AffineApplyOp.OPERATION_NAME:
        merged = _merged(owner, loop_sizes)
        major_size = loop_sizes[merged[0]] if merged is not None else None
        if merged is not None and major_size is not None and major_size * merged[2] == extent:
            major, minor, size = merged
            return DimUse(major, f"merges loops d{major} (major) and d{minor} (minor, of size {size}); only the "
                                 "major loop can be tiled", (minor,))
    if _reaches_inputs(position, inputs):
        return _GATHERED
    if owner is not None and owner.name == arith.ConstantOp.OPERATION_NAME:
        return DimUse.blocked("is read at a constant position")
    return DimUse.blocked("is read at a position computed from the loop indices other than by one loop index "
                          "(or a merged pair of them)")


def _index_loop(value: ir.Value) -> int | None:
    owner = defining_op(value)
    if owner is not None and owner.name == linalg.IndexOp.OPERATION_NAME:
        return ir.IntegerAttr(owner.attributes[DIM_ATTR]).value
    return None


def _merged(apply: ir.Operation, loop_sizes: list[int | None]) -> tuple[int, int, int] | None:
    """(major, minor, minor size) when `apply` computes `minor + major * size(minor)` of two loop indices."""
    amap = apply.opview.map.value
    if len(amap.results) != 1 or len(apply.operands) != 2:
        return None
    loops = [loop for v in apply.operands if (loop := _index_loop(v)) is not None]
    if len(loops) != len(apply.operands):
        return None
    expr = amap.results[0]
    if not isinstance(expr, ir.AffineAddExpr):
        return None
    for plain, scaled in ((expr.lhs, expr.rhs), (expr.rhs, expr.lhs)):
        minor = _operand_position(plain, amap)
        if minor is None or not isinstance(scaled, ir.AffineMulExpr):
            continue
        for var, factor in ((scaled.lhs, scaled.rhs), (scaled.rhs, scaled.lhs)):
            major = _operand_position(var, amap)
            if major is None or major == minor or not isinstance(factor, ir.AffineConstantExpr):
                continue
            size = loop_sizes[loops[minor]] if loops[minor] < len(loop_sizes) else None
            if size is not None and factor.value == size:
                return loops[major], loops[minor], size
    return None


def _operand_position(expr: ir.AffineExpr, amap: ir.AffineMap) -> int | None:
    """Which operand of an affine.apply a plain dim or symbol expression names."""
    if isinstance(expr, ir.AffineDimExpr):
        return expr.position
    if isinstance(expr, ir.AffineSymbolExpr):
        return amap.n_dims + expr.position
    return None


def _reaches_inputs(value: ir.Value, inputs: list) -> bool:
    """Is `value` computed (inside the body) from an input element?"""
    stack, seen = [value], set()
    while stack:
        current = stack.pop()
        if isinstance(current, ir.BlockArgument):
            if any(current == arg for arg in inputs):
                return True
            continue
        op = current.owner.operation
        key = id(op)  # the walk is short and holds every op it visits
        if key in seen or op.name == linalg.IndexOp.OPERATION_NAME:
            continue
        seen.add(key)
        if op.name in INDEX_CASTS or op.name.startswith(("arith.", "math.")):
            stack.extend(op.operands)
    return False


def _yields_reads(body: ir.Block, reads: list[ir.Operation], num_inputs: int) -> bool:
    """Does the body yield the table's elements as they are (each read used by the yield only), and nothing
    else, without reading the outputs? Then blocks that yield 0 off their range add up to the lookup."""
    ops = list(body.operations)
    yielded = list(ops[-1].operation.operands)
    read_results = [r.results[0] for r in reads]
    if not yielded or any(not any(v == r for r in read_results) for v in yielded):
        return False
    if any(list(arg.uses) for arg in list(body.arguments)[num_inputs:]):
        return False
    return all(all(use.owner.operation == ops[-1].operation for use in r.uses) for r in read_results)


_CASTS = (arith.IndexCastOp.OPERATION_NAME, arith.IndexCastUIOp.OPERATION_NAME)


def _only_bounds_checks(op: ir.Operation) -> bool:
    """Is `op` a comparison whose result only `cf.assert`s read, or a cast whose result only such comparisons
    read (torch-mlir's `0 <= index < size` checks of an embedding's position)?"""
    if op.name == arith.CmpIOp.OPERATION_NAME:
        return all(use.owner.operation.name == cf.AssertOp.OPERATION_NAME for use in op.results[0].uses)
    return op.name in _CASTS and all(_only_bounds_checks(use.owner.operation) for use in op.results[0].uses)


def _only_positions(body: ir.Block, loop: int, positions: list[ir.Value]) -> bool:
    """Is every `linalg.index loop` of the body used only as one of `positions` (or inside an affine.apply
    that is one)?"""
    for inner in body.operations:
        inner = inner.operation
        if inner.name != linalg.IndexOp.OPERATION_NAME or ir.IntegerAttr(inner.attributes[DIM_ATTR]).value != loop:
            continue
        for use in inner.results[0].uses:
            user = use.owner.operation
            if user.name == tensor.ExtractOp.OPERATION_NAME and use.operand_number > 0 \
                    and _among(inner.results[0], positions):
                continue
            if user.name == affine.AffineApplyOp.OPERATION_NAME and _among(user.results[0], positions):
                continue
            if _only_bounds_checks(user):
                continue  # torch-mlir's bounds asserts on the position: a block's index passes them too
            return False
    return True


def _among(value: ir.Value, values: list[ir.Value]) -> bool:
    return any(value == v for v in values)


def _defined_outside(value: ir.Value, op: ir.Operation) -> bool:
    if not isinstance(value.type, ir.RankedTensorType):
        return False
    parent = value.owner.owner if isinstance(value, ir.BlockArgument) else value.owner.operation
    while parent is not None:
        parent = parent.operation
        if parent == op:
            return False
        parent = parent.parent
    return True
