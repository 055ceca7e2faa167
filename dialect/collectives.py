"""Builder and view of the `slicer.*` collectives (only those upstream `shard` cannot express).

MLIR 22's `shard` dialect has all_gather, all_to_all, all_slice, all_reduce and
reduce_scatter, but no general device permutation (`shard.shift` only shifts
along one grid axis). The redistribution synthesizer merges block relabellings
into one arbitrary permutation, so `slicer.permute` (defined in
`slicer.irdl.mlir`) carries it with explicit `(src, dst)` pairs of linear
device ranks (row-major over the grid's axes, as `shard`).
"""

from __future__ import annotations

from collections.abc import Sequence

from mlir import ir

from slicer.core.names import GRID_ATTR, PAIRS_ATTR, PERMUTE


class PermuteOp:
    """View of `slicer.permute`: device `dst` receives the block of device `src` for each pair."""

    def __init__(self, op: ir.Operation | ir.OpView):
        self.operation = op.operation
        assert self.operation.name == PERMUTE, self.operation.name

    @property
    def grid(self) -> str:
        return ir.FlatSymbolRefAttr(self.operation.attributes[GRID_ATTR]).value

    @property
    def pairs(self) -> tuple[tuple[int, int], ...]:
        flat = list(ir.DenseI64ArrayAttr(self.operation.attributes[PAIRS_ATTR]))
        return tuple((flat[i], flat[i + 1]) for i in range(0, len(flat), 2))

    @property
    def source(self) -> ir.Value:
        return self.operation.operands[0]

    @property
    def result(self) -> ir.Value:
        return self.operation.results[0]


def permute(source: ir.Value, grid: str, pairs: Sequence[tuple[int, int]], *, loc=None, ip=None) -> ir.Value:
    """`slicer.permute` of `source` on `grid` moving whole blocks along `pairs` (src, dst linear ranks)."""
    flat = [int(v) for pair in pairs for v in pair]
    op = ir.Operation.create(
        PERMUTE,
        results=[source.type],
        operands=[source],
        attributes={GRID_ATTR: ir.FlatSymbolRefAttr.get(grid), PAIRS_ATTR: ir.DenseI64ArrayAttr.get(flat)},
        loc=loc,
        ip=ip,
    )
    return op.results[0]
