"""Block-wise copies of gathers by index (`slicer.rules.gathers`): the tables a copy reads are sliced like
operands, and a copy tiled along a table's gathered dim becomes a masked lookup.

A table is captured by the op's body, not an operand: its block is a `slicer.slice` made before the copy,
and the copy's body reads the block instead (`read_table_blocks`).

Vocabulary parallelism (Megatron-LM's VocabParallelEmbedding, torchtitan's): with the table's gathered dim
(size V) tiled over k devices, device r holds rows [r * V/k, (r+1) * V/k). Its block of the lookup reads the
rows its indices name when they are in its range, at the position counted from the range's start, and is 0
for the others (`mask_lookup`). Summing the blocks over the devices gives the lookup exactly (one term is
the row, the others are 0): the op becomes a `sum` loop, whose result the partitioner types as a partial sum
and reduces with one all_reduce where it is needed, as for any contraction over a tiled dim. Where its range
starts is read from a constant of the blocks' offsets `[0, V/k, 2V/k, ...]` sliced by the loop's range
(`range_starts`): a device's own block of a replicated value is a local slice, no communication.

The same start makes a block of a reduction loop whose index the body reads compute with its global index
(`shift_index`): the one-hot pick `sum_v where(target == v, logp, 0)` of a cross-entropy over logits tiled
over the vocabulary is then a sum of blocks, one all_reduce of a [B, S] value.
"""

from __future__ import annotations

import numpy as np
from mlir import ir
from mlir.dialects import arith, linalg, tensor

from slicer.core.mesh import block_size
from slicer.core.names import DIM_ATTR
from slicer.core.operations import nested_ops
from slicer.dialect import slice_


def read_table_blocks(clone: ir.Operation, blocks: dict[ir.Value, ir.Value]) -> None:
    """Make `clone`'s body read each table of `blocks` (table -> its block) instead of the whole table."""
    for inner in nested_ops(clone):
        for index, operand in enumerate(inner.operands):
            for table, block in blocks.items():
                if operand == table:
                    inner.operands[index] = block


def range_starts(dim_size: int, size: int, range_value: ir.Value) -> ir.Value:
    """A tensor<1xi64> holding where the device's block of a dim of `dim_size` split in `size` blocks starts
    (blocks of ceil(dim_size / size) rows, the last ones padded when `size` does not divide: docs/partition.md,
    "Uneven shapes"), as a slice, by `range_value`, of the constant offsets of all blocks (built at the current
    insertion point, the constant before the loop that `range_value` belongs to)."""
    loop_op = range_value.owner.owner
    i64 = ir.IntegerType.get_signless(64)
    offsets = np.arange(size, dtype=np.int64) * block_size(dim_size, size)  # padded blocks when uneven
    with ir.InsertionPoint(loop_op):
        starts = arith.constant(ir.RankedTensorType.get([size], i64), ir.DenseElementsAttr.get(offsets))
    return slice_(starts, range_value, 0)


def mask_lookup(clone: ir.Operation, block: ir.Value, dim: int, starts: ir.Value) -> None:
    """Rewrite each read of `block` (a table's block along its gathered dim `dim`) in `clone`'s body into a
    masked lookup: the position minus the block's start (`starts`, a tensor<1xi64>), read only when it falls
    in the block, the element replaced by 0 otherwise."""
    extent = ir.RankedTensorType(block.type).shape[dim]
    reads = [op for op in nested_ops(clone) if op.name == tensor.ExtractOp.OPERATION_NAME and op.operands[0] == block]
    for read in reads:
        with ir.InsertionPoint(read), read.location:
            index = ir.IndexType.get()
            zero_index = arith.constant(index, 0)
            start = arith.index_cast(index, tensor.extract(starts, [zero_index]))
            local = arith.subi(read.operands[1 + dim], start)
            inside = arith.andi(arith.cmpi(arith.CmpIPredicate.sge, local, zero_index),
                                arith.cmpi(arith.CmpIPredicate.slt, local, arith.constant(index, extent)))
            read.operands[1 + dim] = arith.select(inside, local, zero_index)
        element = read.results[0].type
        with ir.InsertionPoint(_next(read)), read.location:
            zero = arith.constant(element, 0.0 if isinstance(element, ir.FloatType) else 0)
            masked = arith.select(inside, read.results[0], zero)
        for use in list(read.results[0].uses):
            user = use.owner.operation
            if user != masked.owner.operation:
                user.operands[use.operand_number] = masked


def _next(op: ir.Operation) -> ir.Operation:
    ops = [o.operation for o in op.block.operations]
    return ops[ops.index(op) + 1]


def shift_index(clone: ir.Operation, loop: int, starts: ir.Value) -> None:
    """Make `clone`'s body read loop `loop`'s global index: each `linalg.index loop` plus the block's start
    (`starts`, a tensor<1xi64>), for a block of a reduction loop whose index the body compares (a one-hot
    pick of a target among the vocabulary)."""
    for read in nested_ops(clone):
        if read.name != linalg.IndexOp.OPERATION_NAME or ir.IntegerAttr(read.attributes[DIM_ATTR]).value != loop:
            continue
        uses = list(read.results[0].uses)
        with ir.InsertionPoint(_next(read)), read.location:
            index = ir.IndexType.get()
            start = arith.index_cast(index, tensor.extract(starts, [arith.constant(index, 0)]))
            shifted = arith.addi(read.results[0], start)
        for use in uses:
            use.owner.operation.operands[use.operand_number] = shifted
