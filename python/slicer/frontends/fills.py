"""Fills made at the shape their readers take (step 4 of the cleanup, `cleanup.py`).

torch-mlir starts every contraction's accumulator with a fill of zeros (a `linalg.generic` with no inputs once
generalized), and CSE makes one value of all the fills of one shape. The reshape fusion of step 3 then reads it
through an `expand_shape` per contraction: ring attention's step scores `[B, H, n, c, c]` and its backward's
`[H, n, c, c]` both take blocks of one `[B*H*n, c, c]` fill. Tiled on the block dim n, the readers want the
fill tiled on the minor part of a collapsed group, which a layout cannot say: propagation left it whole, each
device made all of it and kept its slice from the first forward kernel to the backward (512 MiB a device at
S=8192 on 2 devices).

A fill has no inputs and costs nothing to make again, so each reshape of a fill becomes a fill of the
reshape's shape: propagation then lays out each fill as its reader wants, and the kernel graph makes it again in
every kernel that reads it (`lowering/graph_builder.py`: fills are rematerialised). Upstream's
`FoldFillWithTensorReshape` does this for `linalg.fill`, not for the generic form the cleanup leaves.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, linalg, tensor

from slicer.core.linalg_facts import VIEW_OPS
from slicer.core.names import INDEXING_MAPS_ATTR, ITERATOR_TYPES_ATTR
from slicer.core.operations import as_op, walk_ops


def constant_fill(op: ir.Operation) -> bool:
    """`op` is a `linalg.generic` with no inputs and one output, made from a `tensor.empty`, yielding one value at
    every point (a constant of its body or a value from outside it): a fill in generic form."""
    if op.name != linalg.GenericOp.OPERATION_NAME or len(op.operands) != 1 or len(op.results) != 1:
        return False
    init = op.operands[0]
    if isinstance(init.owner, ir.Block) or as_op(init.owner).name != tensor.EmptyOp.OPERATION_NAME:
        return False
    inner = [as_op(o) for o in op.regions[0].blocks[0].operations]
    if any(o.name not in (linalg.YieldOp.OPERATION_NAME, arith.ConstantOp.OPERATION_NAME) for o in inner):
        return False
    body = op.regions[0].blocks[0]
    return all(not (isinstance(v.owner, ir.Block) and v.owner == body) for v in inner[-1].operands)


def fills_at_reshapes(module: ir.Operation) -> int:
    """Replace every `expand_shape` / `collapse_shape` of a fill (`constant_fill`) by a fill of its result's
    shape (module docstring); returns how many. The fills left without readers are for the next cleanup."""
    count, found = 0, True
    while found:  # a reshape of a reshape of a fill reads a new fill once the first is replaced
        found = False
        for op in walk_ops(module, linalg.GenericOp.OPERATION_NAME):
            if not constant_fill(op):
                continue
            for use in list(op.results[0].uses):
                reshape = as_op(use.owner)
                if reshape.name not in VIEW_OPS or reshape.name == tensor.CastOp.OPERATION_NAME:
                    continue
                _fill_like(op, reshape)
                count, found = count + 1, True
    return count


def _fill_like(fill: ir.Operation, reshape: ir.Operation) -> None:
    """A copy of `fill` with the shape of `reshape`'s result, in its place."""
    shaped = ir.RankedTensorType(reshape.results[0].type)
    with ir.InsertionPoint(reshape), reshape.location:
        empty = tensor.EmptyOp(shaped.shape, shaped.element_type)
        copy = fill.clone()
    copy.operands[0] = empty.result
    copy.results[0].set_type(shaped)
    rank = shaped.rank
    copy.attributes[INDEXING_MAPS_ATTR] = ir.ArrayAttr.get(
        [ir.AffineMapAttr.get(ir.AffineMap.get_identity(rank))])
    copy.attributes[ITERATOR_TYPES_ATTR] = ir.Attribute.parse(
        "[" + ", ".join(["#linalg.iterator_type<parallel>"] * rank) + "]")
    reshape.results[0].replace_all_uses_with(copy.results[0])
    reshape.erase()


__all__ = ["constant_fill", "fills_at_reshapes"]
