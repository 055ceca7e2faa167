"""A rotation of a dim by whole blocks (`torch.cat([x[:, :, t:], x[:, :, :t]], dim=2)`, ring attention's keys
and values moving one step around the axis, `frontends/decomp_ring.py`) tiled like its source.

It imports as a `tensor.concat` of `tensor.extract_slice`s of one source, each maybe reshaped back to the
source's rank by an `expand_shape`; when the pieces cover the dim once, in order from offset t around to t - 1,
element i of the result is element (i + t) mod N of the source (`rotation_of`). No law computes it block-wise
(a slice cuts across the blocks of a tiled dim), but with the source tiled on that dim over axes of n devices and
t a multiple of the block N/n, the rotation's blocks are the source's blocks moved between devices: the
partitioner makes it one permute (`spmd/permuted_blocks.py`) and types the result as its source. `tile_rotation` wraps
the rotation in a tile loop over the same range, as a `Tile` of that value would, so that its readers are pulled
into loops and compute on its blocks instead of reading it whole.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import tensor

from slicer.core.capsules import OPERATION_CAPSULE, capsule_pointer
from slicer.core.names import DIM_ATTR, SLICE, STATIC_OFFSETS_ATTR, STATIC_SIZES_ATTR, STATIC_STRIDES_ATTR
from slicer.core.operations import defining_op
from slicer.dialect import SliceOp, TileAction, loop, slice_, yield_

from .journal import Journal
from .loop_facts import inherit_provenance, tile_loop_of


def _shape(value: ir.Value) -> tuple[int, ...] | None:
    t = value.type
    return tuple(t.shape) if isinstance(t, ir.RankedTensorType) and t.has_static_shape else None


def op_id(op: ir.Operation) -> int:
    """The identity of `op` while it lives (`core/capsules.py`)."""
    return capsule_pointer(op._CAPIPtr, OPERATION_CAPSULE)


@dataclass(frozen=True)
class Rotation:
    """`concat` is the rotation of `source` along `dim` by `shift` elements, through the ops of `chain`."""

    concat: ir.Operation
    source: ir.Value
    dim: int
    shift: int
    chain: tuple[ir.Operation, ...]  # the slices (and expand_shapes) feeding the concat, in program order


def _piece(value: ir.Value, dim: int) -> tuple[ir.Value, int, int, list[ir.Operation]] | None:
    """(source, offset, size, ops) if `value` is a slice of one dim `dim` of a static source, stride 1, kept or
    brought back to the source's rank by an expand_shape; each op read only by the next."""
    ops = []
    producer = defining_op(value)
    if producer is not None and producer.name == tensor.ExpandShapeOp.OPERATION_NAME:
        ops.append(producer)
        producer = defining_op(producer.operands[0])
    if producer is None or producer.name != tensor.ExtractSliceOp.OPERATION_NAME or len(producer.operands) != 1:
        return None
    ops.insert(0, producer)
    if any(len(list(op.results[0].uses)) != 1 for op in ops):
        return None
    source = producer.operands[0]
    shape = _shape(source)
    offsets = list(ir.DenseI64ArrayAttr(producer.attributes[STATIC_OFFSETS_ATTR]))
    sizes = list(ir.DenseI64ArrayAttr(producer.attributes[STATIC_SIZES_ATTR]))
    strides = list(ir.DenseI64ArrayAttr(producer.attributes[STATIC_STRIDES_ATTR]))
    if shape is None or any(s != 1 for s in strides) or _shape(value) != tuple(sizes):
        return None
    if any(offsets[d] != 0 or sizes[d] != shape[d] for d in range(len(shape)) if d != dim):
        return None
    return source, offsets[dim], sizes[dim], ops


def rotation_of(op: ir.Operation) -> Rotation | None:
    """The `Rotation` `op` is, if it is one (module docstring)."""
    if op.name != tensor.ConcatOp.OPERATION_NAME or len(op.operands) < 2:
        return None
    dim = ir.IntegerAttr(op.attributes[DIM_ATTR]).value
    pieces = [_piece(v, dim) for v in op.operands]
    if any(p is None for p in pieces):
        return None
    found = [p for p in pieces if p is not None]
    source = found[0][0]
    shape = _shape(source)
    if shape is None or any(p[0] != source for p in found) or sum(p[2] for p in found) != shape[dim]:
        return None
    position = found[0][1]
    for _, offset, size, _ in found:
        if offset != position:
            return None
        position = (offset + size) % shape[dim]
    return Rotation(op, source, dim, found[0][1], tuple(o for p in found for o in p[3]))


def rotations_in(block: ir.Block) -> tuple[dict[int, Rotation], set[int]]:
    """The rotations of `block` (by their concat's identity) and the identities of the ops of their chains."""
    found, chained = {}, set()
    for op in block.operations:
        rotation = rotation_of(op.operation)
        if rotation is not None:
            found[op_id(rotation.concat)] = rotation
            chained |= {op_id(o) for o in rotation.chain}
    return found, chained


def tile_rotation(op: ir.Operation, journal: Journal) -> bool:
    """rotation(loop_R(... tile<d>)) on d by whole blocks == loop_R(slice(rotation, d, r)): the rotation's
    readers read a tile loop over the source's range (module docstring)."""
    if op.name != tensor.ConcatOp.OPERATION_NAME:
        return False
    rotation = rotation_of(op)
    found = tile_loop_of(rotation.source) if rotation is not None else None
    if rotation is None or found is None:
        return False
    producer = found[0]
    action, rng = producer.action, producer.range
    size = _shape(rotation.source)
    if not isinstance(action, TileAction) or action.dim != rotation.dim or rng is None or size is None:
        return False
    whole = size[rotation.dim]
    if whole % rng.size or rotation.shift % (whole // rng.size):
        return False
    result = op.results[0]
    uses = [use.owner.operation for use in result.uses]
    if all(u.name == SLICE and SliceOp(u).dim == rotation.dim for u in uses):
        return False  # already read by blocks
    ops = [o.operation for o in op.block.operations]
    anchor = ops[ops.index(op) + 1]
    journal.rewriting(op, anchor)
    with ir.InsertionPoint(anchor), op.location:
        wrapped = loop([result.type], mesh=producer.mesh, action=TileAction(rotation.dim), range=rng)
        inherit_provenance(wrapped.operation, producer, "rotation by whole blocks: tiled like its source")
    with ir.InsertionPoint(wrapped.body), op.location:
        block = slice_(result, wrapped.range_arg, rotation.dim)
        yield_([block])
    for use in list(result.uses):
        user = use.owner.operation
        if user != block.owner.operation:
            user.operands[use.operand_number] = wrapped.results[0]
    return True


__all__ = ["Rotation", "op_id", "rotation_of", "rotations_in", "tile_rotation"]
