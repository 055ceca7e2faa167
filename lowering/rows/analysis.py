"""What a row op is: a bufferized `linalg.generic` (or `memref.copy`) as loops the rows generator can emit.

Its *lane* is the loop dim along which every operand is contiguous (the last memref dim, stride 1) or
constant; the lane loop runs on `vector<L x T>` (L = `VECTOR_BYTES` / widest element). Outputs that do
not depend on the lane are reductions along it, `out = combine(out, x)`. Ops it cannot take
(transposes, gathers through non-contiguous dims, i1 buffers, index-typed or `linalg.index` bodies)
raise `NotRowwise` and are left to the tile-and-vectorize step (`vectorize.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mlir import ir
from mlir.dialects import arith, linalg, memref

from slicer.core.errors import NotRowwise
from slicer.core.linalg_facts import PARALLEL, combined_with, indexing_maps, input_count, iterator_kinds, projected_dims

from ..body import is_elementwise
from ..memref_facts import VECTOR_BYTES, MemAccess, byte_width, static_strides

_REDUCTION_KINDS: dict[str, tuple[str, float | int | str]] = {
    arith.AddFOp.OPERATION_NAME: ("add", 0.0), arith.MulFOp.OPERATION_NAME: ("mul", 1.0),
    arith.MaximumFOp.OPERATION_NAME: ("maximumf", "-inf"), arith.MinimumFOp.OPERATION_NAME: ("minimumf", "inf"),
    arith.MaxNumFOp.OPERATION_NAME: ("maxnumf", "-inf"), arith.MinNumFOp.OPERATION_NAME: ("minnumf", "inf"),
    arith.AddIOp.OPERATION_NAME: ("add", 0), arith.MulIOp.OPERATION_NAME: ("mul", 1),
    arith.MaxSIOp.OPERATION_NAME: ("maxsi", "min"), arith.MinSIOp.OPERATION_NAME: ("minsi", "max"),
    arith.MaxUIOp.OPERATION_NAME: ("maxui", 0), arith.MinUIOp.OPERATION_NAME: ("minui", "umax"),
    arith.OrIOp.OPERATION_NAME: ("or", 0), arith.AndIOp.OPERATION_NAME: ("and", -1),
    arith.XOrIOp.OPERATION_NAME: ("xor", 0),
}
"""Combiner op -> (`vector.reduction` kind, identity) of the reductions the generator takes."""


@dataclass
class Reduction:
    """An output reduced along the lane: out = combine(out, x)."""

    combiner: ir.Operation
    kind: str
    identity: float | int | str  # a number, or a name: "-inf", "inf" (floats), "min", "max", "umax" (integers)
    value: ir.Value  # x


@dataclass
class RowOp:
    """One op as the rows generator sees it: loop ranges, buffers, body, lane and reductions along the lane."""

    op: ir.Operation
    ranges: list[int]
    parallel: set[int]
    inputs: list[MemAccess | ir.Value]  # memrefs, or scalar values (fill's value)
    outputs: list[MemAccess]
    args: list[ir.Value]  # block arguments: inputs..., outputs...
    body: list[ir.Operation]
    yields: list[ir.Value]
    lane: int | None
    lanes: int
    reductions: dict[int, Reduction] = field(default_factory=dict)

    @property
    def row_prefix(self) -> list[int]:
        """The leading dims shared by every output map, parallel: the dims this op can run row by row."""
        prefix = []
        for position in range(min(len(o.dims) for o in self.outputs)):
            dims = {o.dims[position] for o in self.outputs}
            if len(dims) != 1:
                break
            (dim,) = dims
            if dim not in self.parallel or dim in prefix:
                break
            prefix.append(dim)
        return prefix

    def vector_rows(self) -> int:
        """Rows that leave this op its lane (the row prefix up to the lane)."""
        prefix = self.row_prefix
        return prefix.index(self.lane) if self.lane in prefix else len(prefix)

    def memrefs(self) -> list[MemAccess]:
        return [m for m in self.inputs if isinstance(m, MemAccess)] + self.outputs


def _mem(value: ir.Value, dims) -> MemAccess:
    type_ = ir.MemRefType(value.type)
    if not type_.has_static_shape:
        raise NotRowwise("dynamic shape")
    element = type_.element_type
    if isinstance(element, ir.IntegerType) and element.width < 8:
        raise NotRowwise("i1 buffer")
    strides = static_strides(type_)
    if strides is None:
        raise NotRowwise("dynamic strides")
    return MemAccess(value, type_, tuple(dims), strides)


def _byte_width(type_: ir.Type) -> int:
    width = byte_width(type_)
    if width is None:
        raise NotRowwise(f"element type {type_}")
    return width


def _operands(op: ir.Operation, loops: int) -> tuple[list, list[MemAccess], list[int]]:
    """The generic's inputs (memrefs, or scalar values such as a fill's), its output memrefs, and the loop ranges."""
    n_in = input_count(op)
    inputs: list[MemAccess | ir.Value] = []
    outputs: list[MemAccess] = []
    ranges: list[int | None] = [None] * loops
    for index, (value, amap) in enumerate(zip(list(op.operands), indexing_maps(op))):
        dims = projected_dims(amap)
        if dims is None:
            raise NotRowwise("indexing map is not a projection")
        if not isinstance(value.type, ir.MemRefType):
            if index >= n_in or dims:
                raise NotRowwise("non-memref output")
            inputs.append(value)
            continue
        mem = _mem(value, dims)
        for d, size in zip(dims, mem.type.shape):
            if ranges[d] is not None and ranges[d] != size:
                raise NotRowwise("inconsistent ranges")
            ranges[d] = size
        (inputs if index < n_in else outputs).append(mem)
    if any(r is None for r in ranges) or not outputs or not loops:
        raise NotRowwise("a loop dim indexes no buffer")
    return inputs, outputs, [r for r in ranges if r is not None]  # all of them (checked above)


def _checked_body(block: ir.Block) -> list[ir.Operation]:
    """The body's ops without the yield: elementwise arith/math, no index values."""
    body = list(block.operations)[:-1]
    for b in body:
        if not is_elementwise(b):
            raise NotRowwise(f"body op {b.name}")
        for r in b.results:
            if isinstance(r.type, ir.IndexType):
                raise NotRowwise("index values in the body")
    return body


def _lane(loops: int, mems: list[MemAccess], outputs: list[MemAccess], ranges: list[int]) -> int | None:
    """A dim along which every buffer is contiguous or constant; the outputs' last dim first, then the longest."""
    candidates = [d for d in range(loops) if all(not m.depends(d) or m.contiguous_along(d) for m in mems)]
    preferred = [o.dims[-1] for o in outputs if o.dims] + sorted(candidates, key=lambda d: -ranges[d])
    for d in preferred:
        if d in candidates:
            return d
    return None


def analyze(op: ir.Operation) -> RowOp:
    """The row op of a bufferized `linalg.generic` or `memref.copy`, or NotRowwise(reason)."""
    op = op.operation
    if op.name == memref.CopyOp.OPERATION_NAME:
        return _copy_op(op)
    if op.name != linalg.GenericOp.OPERATION_NAME:
        raise NotRowwise(op.name)
    kinds = iterator_kinds(op)
    if len(op.results):
        raise NotRowwise("tensor results")
    inputs, outputs, ranges = _operands(op, len(kinds))
    parallel = {d for d, k in enumerate(kinds) if k == PARALLEL}
    for out in outputs:
        if not parallel <= set(out.dims):
            raise NotRowwise("an output misses a parallel dim")
    block = op.regions[0].blocks[0]
    body = _checked_body(block)
    yield_op = list(block.operations)[-1]
    widths = [_byte_width(m.type.element_type) for m in inputs + outputs if isinstance(m, MemAccess)]
    widths += [_byte_width(r.type) for b in body for r in b.results]
    widths += [_byte_width(v.type) for v in inputs if not isinstance(v, MemAccess)]
    lanes = VECTOR_BYTES // max(widths)
    mems = [m for m in inputs if isinstance(m, MemAccess)] + outputs
    lane = _lane(len(kinds), mems, outputs, ranges)
    row = RowOp(op, ranges, parallel, inputs, outputs, list(block.arguments), body,
                list(yield_op.operands), lane, lanes)
    # Outputs that do not depend on the lane are reductions along it: out = combine(out, x).
    for k, out in enumerate(outputs):
        if lane is None or out.depends(lane):
            continue
        row.reductions[k] = _reduction(row, k)
    return row


def _reduction(row: RowOp, k: int) -> Reduction:
    out_arg = row.args[len(row.inputs) + k]
    found = combined_with(row.yields[k], out_arg)
    if found is None or found[0].name not in _REDUCTION_KINDS:
        raise NotRowwise("a reduction that is not combine(out, x)")
    combiner, x = found
    # out must feed only the combiner
    for op in row.body:
        if op != combiner and out_arg in list(op.operands):
            raise NotRowwise("the accumulator is read elsewhere in the body")
    kind, identity = _REDUCTION_KINDS[combiner.name]
    return Reduction(combiner, kind, identity, x)


def _copy_op(op: ir.Operation) -> RowOp:
    src, dst = op.operands
    if not isinstance(src.type, ir.MemRefType) or ir.MemRefType(src.type).rank == 0:
        raise NotRowwise("copy of a 0-d buffer")
    rank = ir.MemRefType(src.type).rank
    a, b = _mem(src, list(range(rank))), _mem(dst, list(range(rank)))
    lane = rank - 1
    if not (a.contiguous_along(lane) and b.contiguous_along(lane)):
        raise NotRowwise("copy of non-contiguous rows")
    lanes = VECTOR_BYTES // _byte_width(a.type.element_type)
    return RowOp(op, list(a.type.shape), set(range(rank)), [a], [b], [src, dst], [], [src], lane, lanes)
