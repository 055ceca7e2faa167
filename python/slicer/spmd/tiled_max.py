"""A maximum over a tiled dim, reduced where the blocks are: each device reduces its block, then one
all_reduce by maximum (`redistribution.AllReduce(reduction="max")`) over the axes tiling that dim.

Log-softmax (and cross-entropy) over logits tiled over the vocabulary starts with the maximum of each row;
propagation leaves that reduction replicated (a maximum is no sum: `sum` loops cannot carry it), and taking
its operand replicated would all_gather the whole logits [B, S, V]. A maximum is idempotent, so the maxima
of the blocks reduced again give the maximum of the whole, whatever the init: the op reads its device's own
block, its result is a pending maximum over the tiling axes (typed as partial over them, as a sum loop's
result), and the all_reduce by maximum moves one [B, S] value instead (Megatron-LM's vocab-parallel
cross-entropy does the same).
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import linalg

from slicer.core.linalg_facts import REDUCTION, indexing_maps, input_count, iterator_kinds, loop_dim
from slicer.core.names import DIST_ATTR
from slicer.redistribution import AllReduce, DistType, Plan
from slicer.rules import is_max_reduction

from .dist_types import dist_text, replicated, tensor_shape
from .emit_collectives import PlanEmitter
from .padding import Pad


@dataclass(frozen=True)
class TiledMax:
    """The max reduction's input is tiled on reduced dims only, over `axes`: reduce locally, then by maximum."""

    axes: tuple[str, ...]
    partial: DistType  # the type of the local result: pending over `axes`
    reduced: DistType  # the replicated result

    def step(self) -> AllReduce:
        return AllReduce(self.axes, self.reduced, reduction="max")


def tiled_max(op: ir.Operation, input_type: DistType | None, context: frozenset[str]) -> TiledMax | None:
    """A `TiledMax` when `op` is a linalg reduction by maximum of one input whose distributed type
    `input_type` tiles only dims the op reduces (and is no partial sum), else None."""
    if (op.name != linalg.GenericOp.OPERATION_NAME or len(op.results) != 1 or input_type is None
            or input_count(op) != 1):
        return None
    shape = tensor_shape(op.results[0])
    if shape is None or input_type.partial or not any(input_type.dims):
        return None
    body = op.regions[0].blocks[0]
    if not is_max_reduction(body, 0, 1):
        return None
    kinds = iterator_kinds(op)
    input_map = indexing_maps(op)[0]
    axes: list[str] = []
    for dim, dim_axes in enumerate(input_type.dims):
        if not dim_axes:
            continue
        loop = loop_dim(input_map.results[dim])
        if loop is None or kinds[loop] != REDUCTION:
            return None
        axes += dim_axes
    if set(axes) & context:
        return None
    return TiledMax(tuple(axes), DistType(shape, replicated(shape).dims, tuple(axes)), replicated(shape))


def reduce_by_max(partitioner, op: ir.Operation, context: frozenset[str]) -> bool:
    """Partition `op` as a `TiledMax` when it is one (False, nothing done, otherwise): the op reduces its
    device's block (masked where the block is padding: an uneven tiled dim), and one all_reduce by maximum after
    it gives the replicated result. `partitioner` is the function's `spmd.conversion.PartitionState`."""
    p = partitioner
    entry = p.lookup(op.operands[0]) if len(op.operands) else None
    found = tiled_max(op, entry.type if entry is not None and entry.context == context else None, context)
    if found is None:
        return False
    op.operands[0] = entry.local
    init = p.lookup(op.operands[1])
    if init is not None:
        op.operands[1] = p.convert(init, replicated(init.type.shape), op,
                                   f"the init of '{op.name}' (a maximum over tiled dims) is read replicated")
    local_shape = entry.type.local_shape(p.mesh)
    pads = {d: Pad(n, local_shape[d], tuple(entry.type.dims[d]))
            for d, n in enumerate(entry.shape) if n != entry.type.shape[d]}
    if pads:  # the tail rows of the last blocks are padding: the maximum skips them
        p.padded_results(op, context, {0: pads})
    partial = p.canon(found.partial, op.location)
    op.attributes[DIST_ATTR] = ir.ArrayAttr.get([ir.StringAttr.get(dist_text(partial, context))])
    plan = Plan(p.mesh, partial, p.canon(found.reduced, op.location), (found.step(),),
                dtype=str(ir.RankedTensorType(op.results[0].type).element_type))
    origin = f"'{op.name}' (a maximum over dims tiled over [{','.join(found.axes)}])"
    where = ir.Location.name(f"all_reduce: the maximum of the blocks over [{','.join(found.axes)}]; source: "
                             f"{origin} of {entry.origin}", childLoc=ir.Location.fused([op.location, entry.loc]))
    ops = [o.operation for o in op.block.operations]
    with ir.InsertionPoint(ops[ops.index(op) + 1]):
        reduced = PlanEmitter(p.mesh, p.grid, p.coords).emit(op.results[0], plan, lambda _: where)
    p.env[op.results[0]] = type(entry)(reduced, found.reduced, context, origin, op.location)
    return True
