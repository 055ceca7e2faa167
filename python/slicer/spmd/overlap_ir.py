"""What the overlap rewrites of an SPMD function (`chunked_contractions.py`, `bucketing.py`) read from its IR:
the collectives' groups and what they move, the `slicer.dist` text of any value, and the one estimate of a
collective's and a contraction's time both rewrites decide with.

The estimates are the redistribution cost model's (`CostModel.seconds`: latency plus the busiest device's
bytes over the bandwidth of the axes) and, for kernels, `KERNEL_FLOPS`: the contraction rate this runtime's
GEMM kernels reach on one core (benchmarks/README.md, "end_to_end.py").
"""

from __future__ import annotations

import numpy as np
from mlir import ir

from slicer.core.names import DIST_ATTR, GRID_ATTR, GRID_AXES_ATTR
from slicer.core.operations import as_op
from slicer.redistribution import CostModel

from .report import received_bytes

KERNEL_FLOPS = 2.0e11
"""Floating-point operations per second of a contraction kernel on one core (an estimate: see above)."""

MEMORY_BANDWIDTH = 1.0e10
"""Bytes per second one core copies from one buffer to another (measured with numpy on the development machine):
what an extra copy costs."""

KERNEL_OVERHEAD = 20e-6
"""Seconds a kernel call or a collective's start and wait cost the runtime beyond their work."""


def group_of(op: ir.Operation, grid_table: dict) -> tuple[tuple[str, ...], int]:
    """The mesh axes a collective op communicates over and the size of its groups."""
    names, sizes = grid_table.get(ir.FlatSymbolRefAttr(op.attributes[GRID_ATTR]).value, ([], []))
    indices = list(ir.DenseI16ArrayAttr(op.attributes[GRID_AXES_ATTR])) if GRID_AXES_ATTR in op.attributes else []
    axes = tuple(names[i] if i < len(names) else str(i) for i in indices)
    return axes, int(np.prod([sizes[i] for i in indices if i < len(sizes)], dtype=np.int64))


def collective_seconds(op: ir.Operation, grid_table: dict, model: CostModel) -> float:
    """Estimated time of the collective `op` (latency + busiest bytes / bandwidth)."""
    axes, group = group_of(op, grid_table)
    return model.seconds(axes, received_bytes(op, group)) if group > 1 else 0.0


def tensor_bytes(value: ir.Value) -> int:
    t = ir.RankedTensorType(value.type)
    bits = t.element_type.width if hasattr(t.element_type, "width") else 32
    return int(np.prod(t.shape, dtype=np.int64)) * max(1, bits // 8)


def dist_of(value: ir.Value) -> str | None:
    """The `slicer.dist` text of `value` (an op result's, or a function argument's), None when it has none."""
    if isinstance(value.owner, ir.Block):
        block = value.owner
        func = block.owner.opview
        attrs = func.arg_attrs
        if attrs is None:
            return None
        entry = ir.DictAttr(attrs[ir.BlockArgument(value).arg_number])
        return ir.StringAttr(entry[DIST_ATTR]).value if DIST_ATTR in entry else None
    owner = value.owner.operation
    if DIST_ATTR not in owner.attributes:
        return None
    return ir.StringAttr(ir.ArrayAttr(owner.attributes[DIST_ATTR])[ir.OpResult(value).result_number]).value


def set_dist(op, text: str | None) -> None:
    """Give the one-result op `op` the `slicer.dist` text `text` (nothing when None)."""
    if text is not None:
        as_op(op).attributes[DIST_ATTR] = ir.ArrayAttr.get([ir.StringAttr.get(text)])


def top_level(op: ir.Operation, block: ir.Block) -> ir.Operation:
    """The op of `block` that contains `op` (itself when it is one)."""
    while op.parent is not None and op.block != block:
        op = op.parent.operation
    return op
