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
from slicer.redistribution import AllReduce, DistType
from slicer.rules import is_max_reduction

from .dist_types import replicated, tensor_shape


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
