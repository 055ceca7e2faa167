"""Import-time cleanup: the shapes programs from frameworks come in, made partitionable.

torch-mlir's linalg is correct but written for a single device: named ops next to explicit transposes,
keepdim reductions into `[B, S, 1]` tensors, softmax's max with an unused argmax result, and a fused QKV
projection cut into its pieces with `tensor.extract_slice`. Propagation can push a tiling through all of it
only once the program says which dims are which. The cleanup, upstream passes wherever they exist:

1. `linalg-generalize-named-ops`: every linalg op as a `linalg.generic` (transposes become indexing maps);
   `linalg-fold-unit-extent-dims`: keepdim unit dims dropped (a `(d0, d1, 0)` map blocks the reshape fusion
   below); `canonicalize`.
2. `split_into_pieces` (here: upstream has no pass for it): `extract_slice`s that cut one dim of a tensor into
   aligned pieces of equal size (`qkv[..., 16:32]` of a 48-wide dim) take a piece of an `expand_shape` of
   that dim instead (`[.., 48] -> [.., 3, 16]`, piece `[.., 1, ..]`, rank-reducing). The piece's dims are then
   dims of the tensor, so tiling the heads of Q tiles dim 16 of the expanded QKV projection.
3. `linalg-fuse-elementwise-ops`: elementwise chains fused, unused results (softmax's argmax) erased, and the
   `expand_shape`s above propagated into their producers by expanding their loops (so the QKV weight is read
   as `[3, 16, D]`); `canonicalize`, `cse`.

Before all of it, `drop_reciprocal_asserts`: torch-mlir guards every float reciprocal (BatchNorm's
`1 / sqrt(var + eps)`) with `cf.assert %x != 0, "unimplemented: tensor with zero element"`. torch has no such
check (its reciprocal of 0 is inf, which the division computes anyway), and the assert is a side effect that
elementwise fusion cannot erase: it stays behind as a result-less `linalg.generic` per consumer, reading the conv
output, which propagation leaves replicated and partitioning gathers (3 all_gathers in a small CNN under data
parallelism). Dropping the asserts keeps torch's semantics and leaves no such op.

Elementwise producers fused into a contraction are recomputed per output element of the contraction
(layer norm inside the QKV matmul): the same program, partitionable as one op.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import cf, tensor

from slicer.core.names import STATIC_OFFSETS_ATTR, STATIC_SIZES_ATTR, STATIC_STRIDES_ATTR
from slicer.core.pipeline import run_pipeline
from slicer.dialect import walk_ops

BEFORE_SPLITS = "func.func(linalg-generalize-named-ops,linalg-fold-unit-extent-dims,canonicalize)"
AFTER_SPLITS = "func.func(linalg-fuse-elementwise-ops,canonicalize,cse)"


def clean_up(module: ir.Operation) -> None:
    """Run the import-time cleanup on `module` (in place, in its context)."""
    drop_reciprocal_asserts(module)
    run_pipeline(module, BEFORE_SPLITS)
    split_into_pieces(module)
    run_pipeline(module, AFTER_SPLITS)


#: The message of torch-mlir's check that a reciprocal's operand is not zero (see the module docstring).
RECIPROCAL_ASSERT = "unimplemented: tensor with zero element"


def drop_reciprocal_asserts(module: ir.Operation) -> int:
    """Erase torch-mlir's `cf.assert`s of `RECIPROCAL_ASSERT` (see the module docstring); returns how many."""
    found = [op for op in walk_ops(module, cf.AssertOp.OPERATION_NAME)
             if ir.StringAttr(op.opview.msg).value == RECIPROCAL_ASSERT]
    for op in found:
        op.erase()
    return len(found)


def _static(op: ir.Operation, name: str) -> list[int]:
    return list(ir.DenseI64ArrayAttr(op.attributes[name]))


def _piece(op: ir.Operation) -> tuple[int, int] | None:
    """(dim, size) if `op` is an extract_slice taking an aligned piece of one dim of a static tensor (and the
    other dims whole), else None."""
    if op.name != tensor.ExtractSliceOp.OPERATION_NAME or len(op.operands) != 1:
        return None  # dynamic offsets or sizes
    source, result = op.operands[0].type, op.results[0].type
    if not isinstance(source, ir.RankedTensorType) or not source.has_static_shape or source.rank != result.rank:
        return None
    offsets, sizes, strides = _static(op, STATIC_OFFSETS_ATTR), _static(op, STATIC_SIZES_ATTR), _static(op, STATIC_STRIDES_ATTR)
    cut = [d for d in range(source.rank) if offsets[d] != 0 or sizes[d] != source.shape[d]]
    if len(cut) != 1 or any(s != 1 for s in strides):
        return None
    dim = cut[0]
    size, whole = sizes[dim], source.shape[dim]
    if not 1 < size < whole or whole % size or offsets[dim] % size:
        return None
    return dim, size


def split_into_pieces(module: ir.Operation) -> int:
    """Rewrite aligned pieces of one dim as pieces of an expanded dim (see the module docstring); returns how
    many slices were rewritten. The slices of one value along one dim with one size share one expand_shape."""
    groups: dict[tuple, list[ir.Operation]] = {}
    for op in walk_ops(module, tensor.ExtractSliceOp.OPERATION_NAME):
        found = _piece(op)
        if found is not None:
            groups.setdefault((op.operands[0], *found), []).append(op)
    for (source, dim, size), slices in groups.items():
        type_ = ir.RankedTensorType(source.type)
        shape = list(type_.shape)
        expanded = shape[:dim] + [shape[dim] // size, size] + shape[dim + 1:]
        groups_ = [[d] for d in range(dim)] + [[dim, dim + 1]] + [[d + 1] for d in range(dim + 1, len(shape))]
        owner = source.owner
        if isinstance(owner, ir.Block):
            ip = ir.InsertionPoint.at_block_begin(owner)
        else:
            ip = ir.InsertionPoint.after(owner.operation if isinstance(owner, ir.OpView) else owner)
        with ip, slices[0].location:
            whole = tensor.expand_shape(ir.RankedTensorType.get(expanded, type_.element_type), source, groups_, [],
                                        expanded)
        for op in slices:
            index = _static(op, STATIC_OFFSETS_ATTR)[dim] // size
            offsets = [0] * len(expanded)
            offsets[dim] = index
            sizes = shape[:dim] + [1, size] + shape[dim + 1:]
            with ir.InsertionPoint(op), op.location:
                piece = tensor.extract_slice(op.results[0].type, whole, [], [], [], offsets, sizes, [1] * len(expanded))
            op.results[0].replace_all_uses_with(piece)
            op.erase()
    return sum(len(s) for s in groups.values())


__all__ = ["AFTER_SPLITS", "BEFORE_SPLITS", "RECIPROCAL_ASSERT", "clean_up", "drop_reciprocal_asserts", "split_into_pieces"]
