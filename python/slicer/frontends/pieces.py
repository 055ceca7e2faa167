"""Aligned slices of one dim rewritten as pieces of an expanded dim (step 2 of the cleanup, `cleanup.py`).

`tensor.extract_slice`s that cut one dim of a static tensor into aligned pieces of equal size (`qkv[..., 16:32]`
of a 48-wide dim) take a piece of an `expand_shape` of that dim instead (`[.., 48] -> [.., 3, 16]`, piece
`[.., 1, :]`, rank-reducing). The piece's dims are then dims of the tensor, so tiling the heads of Q tiles
dim 16 of the expanded QKV projection. Upstream MLIR has no pass for it.

Slices of slices (GPT-NeoX's partial rotary: `q = qkv[..., :hd]`, `q_rot = q[..., :rot]`, rotate_half's halves
of `q_rot`) are pieces of pieces: the groups are rewritten in program order, so a slice's source is rewritten
before its own slices are, and each group reads its source from its slices' operand at the time it is
rewritten (the piece that replaced it), never from a value found before. The replaced slices are erased only
once every group is rewritten: until then every value found in the first walk stays alive. The shared
expand_shape sits right after its source's definition (or at the start of the block of a block argument),
which dominates every slice of the source; each new op keeps the location (Python line) of the slice it
replaces, the expand_shape that of the group's first slice.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mlir import ir
from mlir.dialects import tensor

from slicer.core.errors import InternalError
from slicer.core.names import DIM_ATTR, STATIC_OFFSETS_ATTR, STATIC_SIZES_ATTR, STATIC_STRIDES_ATTR
from slicer.dialect import walk_ops


def _static(op: ir.Operation, name: str) -> list[int]:
    return list(ir.DenseI64ArrayAttr(op.attributes[name]))


def aligned_piece(op: ir.Operation) -> tuple[int, int] | None:
    """(dim, size) if `op` is an extract_slice taking an aligned piece of one dim of a static tensor (offset a
    multiple of size, size a divisor of the dim other than 1 and the dim itself, stride 1, the other dims whole,
    the rank kept), else None."""
    if op.name != tensor.ExtractSliceOp.OPERATION_NAME or len(op.operands) != 1:
        return None  # dynamic offsets or sizes
    source, result = op.operands[0].type, op.results[0].type
    if not isinstance(source, ir.RankedTensorType) or not source.has_static_shape or source.rank != result.rank:
        return None
    offsets, sizes = _static(op, STATIC_OFFSETS_ATTR), _static(op, STATIC_SIZES_ATTR)
    if any(s != 1 for s in _static(op, STATIC_STRIDES_ATTR)):
        return None
    cut = [d for d in range(source.rank) if offsets[d] != 0 or sizes[d] != source.shape[d]]
    if len(cut) != 1:
        return None
    dim = cut[0]
    size, whole = sizes[dim], source.shape[dim]
    if not 1 < size < whole or whole % size or offsets[dim] % size or offsets[dim] + size > whole:
        return None
    return dim, size


@dataclass
class _Group:
    """The aligned slices of one value along one dim with one size: they share one expand_shape."""

    dim: int
    size: int
    slices: list[ir.Operation] = field(default_factory=list)


def _groups(module: ir.Operation) -> list[_Group]:
    """The groups of aligned slices of `module`, in the program order of their first slice (pre-order walk: a
    slice comes after the op defining its source, so the group of that op, when it is a slice, comes first)."""
    groups: dict[tuple, _Group] = {}
    for op in walk_ops(module, tensor.ExtractSliceOp.OPERATION_NAME):
        found = aligned_piece(op)
        if found is not None:
            groups.setdefault((op.operands[0], *found), _Group(*found)).slices.append(op)
    return list(groups.values())


def _after_definition(value: ir.Value) -> ir.InsertionPoint:
    """Right after the definition of `value`: a point that dominates every use of it."""
    owner = value.owner
    if isinstance(owner, ir.Block):
        return ir.InsertionPoint.at_block_begin(owner)
    return ir.InsertionPoint.after(owner.operation)


def _rewrite(group: _Group) -> None:
    """Replace the uses of `group`'s slices by pieces of one expand_shape of their source (the slices stay, dead,
    for the caller to erase)."""
    source = group.slices[0].operands[0]  # now: the piece that replaced a slice of an earlier group
    if any(op.operands[0] != source for op in group.slices):
        raise InternalError(f"split_into_pieces: the slices of one group read different values at "
                            f"{group.slices[0].location}")
    dim, size = group.dim, group.size
    type_ = ir.RankedTensorType(source.type)
    shape = list(type_.shape)
    expanded = shape[:dim] + [shape[dim] // size, size] + shape[dim + 1:]
    reassociation = [[d] for d in range(dim)] + [[dim, dim + 1]] + [[d + 1] for d in range(dim + 1, len(shape))]
    with _after_definition(source), group.slices[0].location:
        whole = tensor.expand_shape(ir.RankedTensorType.get(expanded, type_.element_type), source, reassociation,
                                    [], expanded)
    for op in group.slices:
        offsets = [0] * len(expanded)
        offsets[dim] = _static(op, STATIC_OFFSETS_ATTR)[dim] // size
        sizes = shape[:dim] + [1, size] + shape[dim + 1:]
        with ir.InsertionPoint(op), op.location:
            piece = tensor.extract_slice(op.results[0].type, whole, [], [], [], offsets, sizes, [1] * len(expanded))
        op.results[0].replace_all_uses_with(piece)


def split_into_pieces(module: ir.Operation) -> int:
    """Rewrite aligned pieces of one dim as pieces of an expanded dim (see the module docstring); returns how
    many slices were rewritten."""
    groups = _groups(module)
    for group in groups:
        _rewrite(group)
    replaced = [op for group in groups for op in group.slices]
    for op in replaced:  # no uses left (replaced above)
        op.erase()
    return len(replaced)


def equal_pieces(op: ir.Operation) -> tuple[int, int] | None:
    """(dim, size) if `op` is a tensor.concat of two or more static operands of one size (other than 1) along
    its dim, else None."""
    if op.name != tensor.ConcatOp.OPERATION_NAME or len(op.operands) < 2:
        return None
    types = [op_.type for op_ in op.operands]
    if not all(isinstance(t, ir.RankedTensorType) and t.has_static_shape for t in types):
        return None
    dim = ir.IntegerAttr(op.attributes[DIM_ATTR]).value
    sizes = {t.shape[dim] for t in types}
    return (dim, sizes.pop()) if len(sizes) == 1 and 1 not in sizes else None


def concat_as_stack(module: ir.Operation) -> int:
    """Rewrite each concat of equal pieces along a dim (`equal_pieces`: the backward of a split, `cat(q, k, v)`)
    as the collapse of a concat along a new dim of the pieces (`[.., n, s, ..] -> [.., n * s, ..]`): the
    pieces' dim is then a dim of its own, which propagation can tile through the concat (the concatenated dim
    cannot be: its blocks would mix the pieces), and elementwise fusion pushes the collapse into the concat's
    consumers (which read the pieces as `[.., n, s, ..]`, as `split_into_pieces` makes the forward read
    them). Returns how many concats were rewritten; each new op has the concat's location."""
    count = 0
    for op in walk_ops(module, tensor.ConcatOp.OPERATION_NAME):
        found = equal_pieces(op)
        if found is None:
            continue
        dim, size = found
        shape = list(op.results[0].type.shape)
        element = op.results[0].type.element_type
        piece_shape = shape[:dim] + [1, size] + shape[dim + 1:]
        reassociation = [[d] for d in range(dim)] + [[dim, dim + 1]] + [[d + 1] for d in range(dim + 1, len(shape))]
        with ir.InsertionPoint(op), op.location:
            pieces = [tensor.expand_shape(ir.RankedTensorType.get(piece_shape, element), value, reassociation, [],
                                          piece_shape) for value in op.operands]
            stacked = tensor.concat(ir.RankedTensorType.get(shape[:dim] + [len(pieces), size] + shape[dim + 1:],
                                                            element), dim, pieces)
            for use in list(op.results[0].uses):  # a collapse per use: fusion folds only single-use reshapes
                owner = use.owner.operation
                owner.operands[use.operand_number] = tensor.collapse_shape(op.results[0].type, stacked,
                                                                           reassociation)
        op.erase()
        count += 1
    return count


__all__ = ["aligned_piece", "concat_as_stack", "equal_pieces",
           "split_into_pieces"]
