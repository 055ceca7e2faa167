"""Small explicit rule entries for the non-linalg ops propagation meets (docs/propagation.md).

Details: docs/module-notes.md, `rules/explicit.py`.
"""

from __future__ import annotations

from collections.abc import Callable

from mlir import ir
from mlir.dialects import arith, tensor

from slicer.core.linalg_facts import PARALLEL
from slicer.core.names import (
    DIM_ATTR,
    REASSOCIATION_ATTR,
    STATIC_HIGH_ATTR,
    STATIC_LOW_ATTR,
    STATIC_OFFSETS_ATTR,
    STATIC_SIZES_ATTR,
    STATIC_STRIDES_ATTR,
    VALUE_ATTR,
)

from .table import DimUse, OpRule


def explicit_rule(op: ir.Operation) -> OpRule | None:
    """The explicit rule of `op`, or None if it has no entry."""
    if op.name in _ENTRIES:
        return _ENTRIES[op.name](op)
    if op.name.split(".")[0] in ("arith", "math"):
        return _elementwise(op)
    return None


def _ranked(value: ir.Value) -> ir.RankedTensorType | None:
    return value.type if isinstance(value.type, ir.RankedTensorType) else None


def _loops(rank: int) -> tuple[str, ...]:
    return (PARALLEL,) * rank


def _identity(rank: int) -> tuple[DimUse, ...]:
    return tuple(DimUse.walks(d) for d in range(rank))


def _elementwise(op: ir.Operation) -> OpRule | None:
    shapes = {tuple(t.shape) for v in list(op.operands) + list(op.results) if (t := _ranked(v)) is not None}
    tensors = [v for v in list(op.operands) + list(op.results) if _ranked(v) is not None]
    if not op.results or len(tensors) != len(op.operands) + len(op.results) or len(shapes) != 1:
        return None  # scalars, or not elementwise on tensors of one shape
    rank = len(next(iter(shapes)))
    return OpRule(op.name, _loops(rank), tuple(_identity(rank) for _ in op.operands),
                  tuple(_identity(rank) for _ in op.results))


def _constant(op: ir.Operation) -> OpRule | None:
    """A splat tensor constant: each block is the same splat of the block shape (like tensor.empty)."""
    if _ranked(op.results[0]) is None:
        return None  # a scalar constant is not partitioned
    value = op.attributes[VALUE_ATTR]
    rank = op.results[0].type.rank
    if isinstance(value, ir.DenseElementsAttr) and value.is_splat:
        return OpRule(op.name, _loops(rank), (), (_identity(rank),))
    reason = "belongs to a non-splat constant, whose blocks are different constants (no rule yet)"
    return OpRule(op.name, _loops(rank), (), (tuple(DimUse.blocked(reason) for _ in range(rank)),))


def _empty(op: ir.Operation) -> OpRule:
    rank = op.results[0].type.rank
    return OpRule(op.name, _loops(rank), tuple(() for _ in op.operands), (_identity(rank),))


def _groups(op: ir.Operation) -> list[list[int]]:
    return [[ir.IntegerAttr(i).value for i in ir.ArrayAttr(g)] for g in ir.ArrayAttr(op.attributes[REASSOCIATION_ATTR])]


def _leading(group: list[int], shape: list[int]) -> int:
    """The dim of `group` whose blocks are contiguous in the reshaped dim: the first that is not a unit dim
    (unit dims before it change no offset), or the group's first dim when all are unit dims."""
    return next((d for d in group if shape[d] != 1), group[0])


def _minor_blocks(groups: list[list[int]], shape: list[int], side: str, verb: str) -> tuple[tuple[int, str], ...]:
    return tuple(
        (d, f"{side} dim {d} is a minor dim of the {verb} group {group}; only the major dim of a group "
            "(unit dims aside) can be tiled (the blocks of a minor dim are strided)")
        for group in groups for d in group if d != _leading(group, shape)
    )


def _expand_shape(op: ir.Operation) -> OpRule:
    groups = _groups(op)
    shape = list(op.results[0].type.shape)
    source = tuple(DimUse.walks(_leading(group, shape)) for group in groups)
    operands = (source,) + tuple(() for _ in list(op.operands)[1:])  # output_shape sizes are scalars
    return OpRule(op.name, _loops(len(shape)), operands, (_identity(len(shape)),),
                  loop_blocks=_minor_blocks(groups, shape, "result", "expanded"))


def _collapse_shape(op: ir.Operation) -> OpRule:
    groups = _groups(op)
    shape = list(op.operands[0].type.shape)
    result = tuple(DimUse.walks(_leading(group, shape)) for group in groups)
    return OpRule(op.name, _loops(len(shape)), (_identity(len(shape)),), (result,),
                  loop_blocks=_minor_blocks(groups, shape, "source", "collapsed"))


def _concat(op: ir.Operation) -> OpRule:
    dim = ir.IntegerAttr(op.attributes[DIM_ATTR]).value
    rank = op.results[0].type.rank
    reason = f"is the concatenated dim of tensor.concat (dim = {dim}); its blocks would mix the inputs"
    uses = tuple(DimUse.blocked(reason) if d == dim else DimUse.walks(d) for d in range(rank))
    return OpRule(op.name, _loops(rank), tuple(uses for _ in op.operands), (uses,))


def _slice_dims(op: ir.Operation, full: ir.RankedTensorType) -> list[str | None]:
    """Per dim of `full` (the sliced tensor): None if the slice takes it whole, else why not."""
    offsets, sizes, strides = (list(ir.DenseI64ArrayAttr(op.attributes[k]))
                               for k in (STATIC_OFFSETS_ATTR, STATIC_SIZES_ATTR, STATIC_STRIDES_ATTR))
    reasons: list = []
    for d in range(full.rank):
        if offsets[d] == 0 and sizes[d] == full.shape[d] and strides[d] == 1 and not full.is_dynamic_dim(d):
            reasons.append(None)
        else:
            shown = [
                "?" if v == ir.ShapedType.get_dynamic_size() else str(v) for v in (offsets[d], sizes[d], strides[d])
            ]
            reasons.append(f"is cut by {op.name} (offset {shown[0]}, size {shown[1]}, stride {shown[2]}) instead of "
                           "taken whole, so blocks would cross the slice bounds")
    return reasons


def kept_dims(op: ir.Operation, part: ir.RankedTensorType) -> list[int] | None:
    """For an extract/insert slice (maybe rank-reducing): the dim of the sliced tensor each dim of the slice
    `part` is, in order, or None if the sizes do not line up. The dropped dims are unit dims of the slice; a
    unit dim is kept as early as possible (any later unit dim can still be dropped), as upstream decides."""
    kept: list = []
    for d, size in enumerate(ir.DenseI64ArrayAttr(op.attributes[STATIC_SIZES_ATTR])):
        if len(kept) < part.rank and size == part.shape[len(kept)]:
            kept.append(d)
        elif size != 1:
            return None
    return kept if len(kept) == part.rank else None


def _slice_rule(op: ir.Operation, full: ir.RankedTensorType, part: ir.RankedTensorType, full_is_operand: int | None,
                part_operand: int | None) -> OpRule:
    """Common shape of extract_slice (full = source, part = result) and insert_slice (full = dest/result)."""
    rank = full.rank
    kept = kept_dims(op, part)
    if kept is None:
        reason = f"belongs to a rank-reducing {op.name} whose sizes do not line up with its slice type"
        uses_full = tuple(DimUse.blocked(reason) for _ in range(rank))
        uses_part = tuple(DimUse.blocked(reason) for _ in range(part.rank))
    else:
        reasons = _slice_dims(op, full)
        uses_full = tuple(DimUse.walks(d) if r is None else DimUse.blocked(r) for d, r in enumerate(reasons))
        uses_part = tuple(uses_full[d] for d in kept)
    operands = []
    for k in range(len(op.operands)):
        operands.append(uses_full if k == full_is_operand else uses_part if k == part_operand else ())
    result = uses_part if op.name == tensor.ExtractSliceOp.OPERATION_NAME else uses_full
    return OpRule(op.name, _loops(rank), tuple(operands), (result,))


def _extract_slice(op: ir.Operation) -> OpRule:
    return _slice_rule(op, op.operands[0].type, op.results[0].type, full_is_operand=0, part_operand=None)


def _insert_slice(op: ir.Operation) -> OpRule:
    return _slice_rule(op, op.operands[1].type, op.operands[0].type, full_is_operand=1, part_operand=0)


def _pad(op: ir.Operation) -> OpRule:
    rank = op.results[0].type.rank
    low, high = (list(ir.DenseI64ArrayAttr(op.attributes[k])) for k in (STATIC_LOW_ATTR, STATIC_HIGH_ATTR))

    def shown(v: int) -> str:
        return "?" if v == ir.ShapedType.get_dynamic_size() else str(v)

    uses = tuple(DimUse.walks(d) if low[d] == 0 and high[d] == 0 else
                 DimUse.blocked(f"is padded by tensor.pad (low {shown(low[d])}, high {shown(high[d])}); a block's "
                                "padding would depend on where the block lies")
                 for d in range(rank))
    return OpRule(op.name, _loops(rank), (uses,) + tuple(() for _ in list(op.operands)[1:]), (uses,))


_ENTRIES: dict[str, Callable[[ir.Operation], OpRule | None]] = {
    arith.ConstantOp.OPERATION_NAME: _constant,
    tensor.EmptyOp.OPERATION_NAME: _empty,
    tensor.ExpandShapeOp.OPERATION_NAME: _expand_shape,
    tensor.CollapseShapeOp.OPERATION_NAME: _collapse_shape,
    tensor.ConcatOp.OPERATION_NAME: _concat,
    tensor.ExtractSliceOp.OPERATION_NAME: _extract_slice,
    tensor.InsertSliceOp.OPERATION_NAME: _insert_slice,
    tensor.PadOp.OPERATION_NAME: _pad,
}
