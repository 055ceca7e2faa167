"""Which consecutive row ops fuse under one loop nest over shared leading row dims.

A group: consecutive ops (only ops without buffers, e.g. constants, may sit between them) whose written
buffers are all indexed by the same leading *row* dims. Legality: every access, read or write, to a
buffer written in the group goes through the row dims in its leading positions (so row i of every op
only meets row i of the others), and buffers are whole (function arguments or allocations, no views).
"""

from __future__ import annotations

import logging

from mlir import ir
from mlir.dialects import memref

from .analysis import NotRowwise, RowOp, analyze

log = logging.getLogger("slicer.kernels")

_VIEW_OPS = (memref.SubViewOp.OPERATION_NAME, memref.CastOp.OPERATION_NAME, memref.ReinterpretCastOp.OPERATION_NAME,
             memref.ExpandShapeOp.OPERATION_NAME, memref.CollapseShapeOp.OPERATION_NAME,
             memref.TransposeOp.OPERATION_NAME, memref.ViewOp.OPERATION_NAME)


def _root(value: ir.Value) -> ir.Value:
    while not isinstance(value, ir.BlockArgument) and value.owner.name in _VIEW_OPS:
        value = value.owner.operands[0]
    return value


def _group_rows(ops: list[RowOp], final: bool = True) -> int:
    """The number of row dims the group can share (0: it cannot be fused).

    While a group grows (`final=False`) it may consist of per-row scalar ops only (a fill and a copy
    of softmax's row maxima); the final count needs one op with vector work inside the rows.
    """
    if len(ops) == 1:
        return 0
    rows = min(len(op.row_prefix) for op in ops)
    sizes = None
    for op in ops:
        prefix = op.row_prefix[:rows]
        extents = [op.ranges[d] for d in prefix]
        if sizes is None:
            sizes = extents
        common = 0
        while common < min(len(sizes), len(extents)) and sizes[common] == extents[common]:
            common += 1
        rows = min(rows, common)
    if rows == 0:
        return 0
    written = {}
    for op in ops:
        for out in op.outputs:
            written[_root(out.value)] = out.value
    for root, value in written.items():
        if root != value:
            return 0  # a view of a buffer: unknown overlap with other views
    while rows > 0:
        # Ops with work inside a row keep their lane; ops that are all rows (a fill of softmax's
        # per-row max) run one scalar per row; at least one op must have vector work.
        vectorized = all(op.vector_rows() >= rows for op in ops if len(op.ranges) > rows)
        has_work = not final or any(len(op.ranges) > rows for op in ops)
        if vectorized and has_work and _rows_legal(ops, rows, written):
            return rows
        rows -= 1
    return 0


def _rows_legal(ops: list[RowOp], rows: int, written: dict) -> bool:
    for op in ops:
        prefix = tuple(op.row_prefix[:rows])
        for m in op.memrefs():
            root = _root(m.value)
            if root in written:
                if m.value != written[root] or tuple(m.dims[:rows]) != prefix:
                    return False
    return True


def _has_buffers(op: ir.Operation) -> bool:
    return (
        any(isinstance(v.type, (ir.MemRefType, ir.UnrankedMemRefType)) for v in op.operands)
        or any(
            isinstance(r.type, (ir.MemRefType, ir.UnrankedMemRefType)) and op.name != memref.AllocOp.OPERATION_NAME
            for r in op.results
        )
        or len(op.regions) > 0
    )


def find_groups(block: ir.Block) -> list[tuple[list[RowOp], int]]:
    """Maximal runs of row ops in `block` that fuse, with their row counts (singletons: 0)."""
    groups: list[tuple[list[RowOp], int]] = []
    current: list[RowOp] = []
    rows = 0

    def close():
        nonlocal current, rows
        if len(current) > 1:
            rows = _group_rows(current, final=True)
            if rows:
                groups.append((current, rows))
            else:
                groups.extend(([op], 0) for op in current)
        elif current:
            groups.append((current, 0))
        current, rows = [], 0

    for op in block.operations:
        op = op.operation
        try:
            row = analyze(op)
        except NotRowwise as why:
            log.debug("rows: %s left to the vectorizer (%s)", op.name, why)
            row = None
        if row is None:
            if _has_buffers(op):
                close()
            continue
        if row.lane is None:
            close()
            continue
        if not current:
            current = [row]
            continue
        candidate = current + [row]
        r = _group_rows(candidate, final=False)
        if r >= 1:
            current, rows = candidate, r
        else:
            close()
            current = [row]
    close()
    return groups
