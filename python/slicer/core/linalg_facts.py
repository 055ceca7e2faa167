"""What a linalg op says about itself, read one way: its loops, how each operand walks them, its body's combiner.

A structured linalg op keeps its facts in three places: its indexing maps (which loop dim indexes each dim
of each operand), its iterator types (which loop dims are reductions) and its body (what it computes per
point, yielding for each output `combine(out, x)` when it accumulates). Every stage that reads them asks
here: the rule table (`slicer.rules`: which dims may be tiled, whether a reduction may be split into a
sum) and the kernel generators (`slicer.lowering`: which loop is the lane, what a contraction's sides
are). The answers are plain facts; each caller decides what a "no" means for it.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import linalg, tensor

from .errors import InternalError
from .names import ITERATOR_TYPES_ATTR, LINALG_PREFIX, OPERAND_SEGMENT_SIZES_ATTR, REASSOCIATION_ATTR

PARALLEL = "parallel"
REDUCTION = "reduction"

_ITERATOR_KINDS = {"#linalg.iterator_type<parallel>": PARALLEL, "#linalg.iterator_type<reduction>": REDUCTION}
"""The text of each upstream iterator type attribute, and its kind."""


def is_linalg_op(op: ir.Operation) -> bool:
    """Whether `op` implements the LinalgOp interface (has indexing maps): `linalg.generic` and the named ops."""
    return op.name.startswith(LINALG_PREFIX) and linalg.get_indexing_maps(op.opview) is not None


def indexing_maps(op: ir.Operation) -> list[ir.AffineMap]:
    """The op's indexing maps, one per operand (inputs, then outputs); [] for an op that is not a linalg op.

    Read through the LinalgOp interface, so a named op (`linalg.matmul`) answers as its generic form would.
    """
    maps = linalg.get_indexing_maps(op.operation.opview)
    return [] if maps is None else [ir.AffineMapAttr(m).value for m in maps]


def loop_sizes(op: ir.Operation, maps: list[ir.AffineMap] | None = None) -> list[int | None]:
    """Each loop dim's static trip count, read from an operand dim that walks it plainly (None where none does
    or that dim is dynamic); `maps`: the op's indexing maps when the caller has them already."""
    maps = indexing_maps(op) if maps is None else maps
    sizes: list[int | None] = [None] * (maps[0].n_dims if maps else 0)
    for value, amap in zip(op.operands, maps):
        type_ = ir.RankedTensorType(value.type) if isinstance(value.type, ir.RankedTensorType) else None
        for j, expr in enumerate(amap.results):
            dim = loop_dim(expr)
            if type_ is not None and dim is not None and sizes[dim] is None and not type_.is_dynamic_dim(j):
                sizes[dim] = type_.shape[j]
    return sizes


def iterator_kinds(op: ir.Operation) -> list[str]:
    """`PARALLEL` or `REDUCTION` for each loop dim of a `linalg.generic`; [] for an op without iterator types
    (a named op carries none: generalize it first)."""
    if ITERATOR_TYPES_ATTR not in op.attributes:
        return []
    return [_iterator_kind(a) for a in ir.ArrayAttr(op.attributes[ITERATOR_TYPES_ATTR])]


def _iterator_kind(attr: ir.Attribute) -> str:
    kind = _ITERATOR_KINDS.get(str(attr))
    if kind is None:
        raise InternalError(f"unknown linalg iterator type {attr} (Slicer knows parallel and reduction): "
                            "please report it")
    return kind


def input_count(op: ir.Operation) -> int:
    """How many of the op's operands are inputs (the rest are outputs): from its operand segments, or, for a
    linalg op on tensors without them (`linalg.reduce`, `linalg.transpose` keep theirs as properties the
    bindings do not show), its operands but one init per result (destination style)."""
    if OPERAND_SEGMENT_SIZES_ATTR in op.attributes:
        return list(ir.DenseI32ArrayAttr(op.attributes[OPERAND_SEGMENT_SIZES_ATTR]))[0]
    return len(op.operands) - len(op.results)


def has_operand_segments(op: ir.Operation) -> bool:
    """Whether the op splits its operands into groups (a linalg structured op: inputs, then outputs)."""
    return OPERAND_SEGMENT_SIZES_ATTR in op.attributes


def loop_dim(expr: ir.AffineExpr) -> int | None:
    """The loop dim `expr` is, or None when it is not a plain loop dim (`d0 + d1`, `0`, `s0`, `d0 * 2`)."""
    return expr.position if isinstance(expr, ir.AffineDimExpr) else None


def projected_dims(amap: ir.AffineMap) -> tuple[int, ...] | None:
    """The loop dim of each result of `amap`, or None when a result is not a plain loop dim (`d0 + d1`, `0`)."""
    dims = tuple(loop_dim(expr) for expr in amap.results)
    return None if None in dims else dims  # type: ignore[return-value]


def mentioned_dims(expr: ir.AffineExpr) -> set[int]:
    """The loop dims an indexing expression reads (`d0 + d1` -> {0, 1}; a constant or symbol -> none)."""
    if isinstance(expr, ir.AffineDimExpr):
        return {expr.position}
    if isinstance(expr, ir.AffineBinaryExpr):
        return mentioned_dims(expr.lhs) | mentioned_dims(expr.rhs)
    return set()


def combined_with(value: ir.Value, accumulator: ir.Value) -> tuple[ir.Operation, ir.Value] | None:
    """(combiner, x) when `value` is `combiner(accumulator, x)` or `combiner(x, accumulator)`, a binary op.

    The accumulation form of a linalg body: a contraction yields `out + f(inputs)` (combiner
    `arith.addf`), a reduction `max(out, x)`; the caller checks the combiner's kind (an addition for a
    reduction split into partial sums, one of its vector reductions for a generator).
    """
    owner = None if isinstance(value, ir.BlockArgument) else value.owner
    if owner is None or len(owner.operands) != 2:
        return None
    lhs, rhs = owner.operands
    if lhs == accumulator:
        return owner, rhs
    if rhs == accumulator:
        return owner, lhs
    return None


def in_body(value: ir.Value, block: ir.Block) -> bool:
    """Whether `value` is defined in `block` (one of its arguments, or a result of one of its ops)."""
    if isinstance(value, ir.BlockArgument):
        return value.owner == block
    owner = value.owner
    return owner.block == block if hasattr(owner, "block") else owner.operation.block == block


def defined_in(value: ir.Value, op: ir.Operation) -> bool:
    """Whether `value` is defined inside `op`'s region (a block argument or a body result)."""
    if isinstance(value, ir.BlockArgument):
        return value.owner.owner.operation == op.operation
    parent = value.owner.operation.parent
    return parent is not None and parent.operation == op.operation


_COLLAPSE, _EXPAND = tensor.CollapseShapeOp.OPERATION_NAME, tensor.ExpandShapeOp.OPERATION_NAME
VIEW_OPS = (_EXPAND, _COLLAPSE, tensor.CastOp.OPERATION_NAME)
"""Ops that only give a tensor another shape or type: their result shares their source's bytes."""


def reshape_kept_dims(op: ir.Operation) -> dict[int, int] | None:
    """For a `tensor.collapse_shape` / `tensor.expand_shape`: operand dim -> result dim for every dim the reshape
    leaves alone (its reassociation group holds it alone: its rows are the same rows, in the same order, so a
    padded block of it stays one). None for any other op."""
    if op.name not in (_COLLAPSE, _EXPAND) or REASSOCIATION_ATTR not in op.attributes:
        return None
    groups = [[ir.IntegerAttr(d).value for d in group] for group in ir.ArrayAttr(op.attributes[REASSOCIATION_ATTR])]
    # collapse: group i lists the operand dims forming result dim i; expand: the result dims of operand dim i
    kept: dict = {}
    for i, group in enumerate(groups):
        if len(group) == 1:
            kept.update({group[0]: i} if op.name == _COLLAPSE else {i: group[0]})
    return kept
