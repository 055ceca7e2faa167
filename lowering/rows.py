"""Elementwise ops and reductions as generated vector loops, fused row by row (`slicer-kernel-rows`).

After bufferization, a program's non-contraction ops are `linalg.generic`s (fills, elementwise chains
already fused by `linalg-fuse-elementwise-ops`, reductions) and `memref.copy`s. This step generates
their loops itself and fuses consecutive ops that work row by row:

- one op: its *lane* dim is the loop dim along which every operand is contiguous (the last memref dim,
  stride 1) or constant; the lane loop runs on `vector<L x T>` (L = 64 bytes / widest element),
  unrolled `unroll` times, with a static scalar remainder. Reductions along the lane keep `unroll`
  vector accumulators and reduce them horizontally once (`vector.reduction`); body values that do
  not depend on the lane (a row's max, a bias column, constants) are computed once before the loop.
  exp/tanh/erf/log become arith expansions (`vector_math.py`), so they stay vectorized;
- a group: consecutive ops (only ops without buffers, e.g. constants, may sit between them) whose
  written buffers are all indexed by the same leading *row* dims are fused under one loop nest over
  the rows: softmax's max, exp, sum and divide, or layernorm's two reductions and two elementwise
  ops, then touch each row while it is in L1, so memory sees one read of the input and one write of
  the output instead of one pass per op. Legality: every access, read or write, to a buffer written
  in the group goes through the row dims in its leading positions (so row i of every op only meets
  row i of the others), and buffers are whole (function arguments or allocations, no views).

Ops it cannot take (transposes, gathers through non-contiguous dims, i1 buffers, index-typed or
`linalg.index` bodies) are left to the tile-and-vectorize step (`vectorize.py`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from math import prod

from mlir import ir
from mlir.dialects import func as func_d

from .body import emit_op, is_elementwise, vector_type
from .emitter import Emitter, Index, module_avx512

log = logging.getLogger("slicer.kernels")

VECTOR_BYTES = 64
NT_BYTES = 16 << 20  # buffers at least this large get non-temporal final stores (half the L3 here)

_REDUCTION_KINDS = {
    "arith.addf": ("add", 0.0), "arith.mulf": ("mul", 1.0), "arith.maximumf": ("maximumf", "-inf"),
    "arith.minimumf": ("minimumf", "inf"), "arith.maxnumf": ("maxnumf", "-inf"), "arith.minnumf": ("minnumf", "inf"),
    "arith.addi": ("add", 0), "arith.muli": ("mul", 1), "arith.maxsi": ("maxsi", "min"), "arith.minsi": ("minsi", "max"),
    "arith.maxui": ("maxui", 0), "arith.minui": ("minui", "umax"), "arith.ori": ("or", 0), "arith.andi": ("and", -1),
    "arith.xori": ("xor", 0),
}
_VIEW_OPS = ("memref.subview", "memref.cast", "memref.reinterpret_cast", "memref.expand_shape",
             "memref.collapse_shape", "memref.transpose", "memref.view")


@dataclass(frozen=True)
class RowsOptions:
    unroll: int = 4

    @staticmethod
    def parse(options: dict[str, str]) -> "RowsOptions":
        unknown = set(options) - {"unroll"}
        if unknown:
            raise ValueError(f"slicer-kernel-rows: unknown option(s) {sorted(unknown)} (known: unroll)")
        result = RowsOptions(**{k: int(v) for k, v in options.items()})
        if result.unroll < 1:
            raise ValueError("slicer-kernel-rows: unroll must be >= 1")
        return result


class NotRowwise(Exception):
    """Why an op is left to the tile-and-vectorize step."""


@dataclass
class Mem:
    value: ir.Value
    type: ir.MemRefType
    dims: tuple[int, ...]
    strides: tuple[int, ...]

    def depends(self, dim: int) -> bool:
        return dim in self.dims

    def contiguous_along(self, dim: int) -> bool:
        return bool(self.dims) and self.dims[-1] == dim and self.strides[-1] == 1 and self.dims.count(dim) == 1


@dataclass
class Reduction:
    """An output reduced along the lane: out = combine(out, x)."""

    combiner: ir.Operation
    kind: str
    identity: object
    value: ir.Value  # x


@dataclass
class RowOp:
    op: ir.Operation
    ranges: list[int]
    parallel: set[int]
    inputs: list[Mem | ir.Value]  # memrefs, or scalar values (fill's value)
    outputs: list[Mem]
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

    def memrefs(self) -> list[Mem]:
        return [m for m in self.inputs if isinstance(m, Mem)] + self.outputs


def _strides(type_: ir.MemRefType) -> tuple[int, ...]:
    strides, _ = type_.get_strides_and_offset()
    if any(type_.is_dynamic_stride_or_offset(s) for s in strides):
        raise NotRowwise("dynamic strides")
    return tuple(strides)


def _mem(value: ir.Value, dims: list[int]) -> Mem:
    type_ = ir.MemRefType(value.type)
    if not type_.has_static_shape:
        raise NotRowwise("dynamic shape")
    element = type_.element_type
    if isinstance(element, ir.IntegerType) and element.width < 8:
        raise NotRowwise("i1 buffer")
    return Mem(value, type_, tuple(dims), _strides(type_))


def _byte_width(type_: ir.Type) -> int:
    if isinstance(type_, ir.IntegerType):
        return max(1, type_.width // 8)
    for cls, width in ((ir.F16Type, 2), (ir.BF16Type, 2), (ir.F32Type, 4), (ir.F64Type, 8)):
        if isinstance(type_, cls):
            return width
    raise NotRowwise(f"element type {type_}")


def analyze(op: ir.Operation) -> RowOp:
    op = op.operation
    if op.name == "memref.copy":
        return _copy_op(op)
    if op.name != "linalg.generic":
        raise NotRowwise(op.name)
    maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
    kinds = ["reduction" if "reduction" in str(a) else "parallel" for a in ir.ArrayAttr(op.attributes["iterator_types"])]
    n_in = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))[0]
    if len(op.results):
        raise NotRowwise("tensor results")
    operands = list(op.operands)
    inputs: list[Mem | ir.Value] = []
    outputs: list[Mem] = []
    ranges: list[int | None] = [None] * len(kinds)
    for index, (value, amap) in enumerate(zip(operands, maps)):
        dims = []
        for expr in amap.results:
            try:
                dims.append(ir.AffineDimExpr(expr).position)
            except (ValueError, TypeError):
                raise NotRowwise("indexing map is not a projection") from None
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
    if any(r is None for r in ranges) or not outputs or not kinds:
        raise NotRowwise("a loop dim indexes no buffer")
    parallel = {d for d, k in enumerate(kinds) if k == "parallel"}
    for out in outputs:
        if not parallel <= set(out.dims):
            raise NotRowwise("an output misses a parallel dim")
    block = op.regions[0].blocks[0]
    body = list(block.operations)
    yield_op = body[-1]
    body = body[:-1]
    for b in body:
        if not is_elementwise(b):
            raise NotRowwise(f"body op {b.name}")
        for r in b.results:
            if isinstance(r.type, ir.IndexType):
                raise NotRowwise("index values in the body")
    widths = [_byte_width(m.type.element_type) for m in inputs + outputs if isinstance(m, Mem)]
    widths += [_byte_width(r.type) for b in body for r in b.results]
    widths += [_byte_width(v.type) for v in inputs if not isinstance(v, Mem)]
    lanes = VECTOR_BYTES // max(widths)

    # The lane: a dim along which every buffer is contiguous or constant; the outputs' last dim first.
    mems = [m for m in inputs if isinstance(m, Mem)] + outputs
    candidates = [d for d in range(len(kinds)) if all(not m.depends(d) or m.contiguous_along(d) for m in mems)]
    lane = None
    preferred = [o.dims[-1] for o in outputs if o.dims] + sorted(candidates, key=lambda d: -ranges[d])
    for d in preferred:
        if d in candidates:
            lane = d
            break
    row = RowOp(op, [int(r) for r in ranges], parallel, inputs, outputs, list(block.arguments), body,
                list(yield_op.operands), lane, lanes)
    # Outputs that do not depend on the lane are reductions along it: out = combine(out, x).
    for k, out in enumerate(outputs):
        if lane is None or out.depends(lane):
            continue
        row.reductions[k] = _reduction(row, k)
    return row


def _reduction(row: RowOp, k: int) -> Reduction:
    out_arg = row.args[len(row.inputs) + k]
    value = row.yields[k]
    combiner = None if isinstance(value, ir.BlockArgument) else value.owner
    if combiner is None or combiner.name not in _REDUCTION_KINDS or len(combiner.operands) != 2:
        raise NotRowwise("a reduction that is not combine(out, x)")
    a, b = combiner.operands
    x = b if a == out_arg else a if b == out_arg else None
    if x is None:
        raise NotRowwise("a reduction that is not combine(out, x)")
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


# ---------------------------------------------------------------------------------------------------
# Grouping
# ---------------------------------------------------------------------------------------------------


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
    return any(isinstance(v.type, (ir.MemRefType, ir.UnrankedMemRefType)) for v in op.operands) or any(
        isinstance(r.type, (ir.MemRefType, ir.UnrankedMemRefType)) and op.name != "memref.alloc" for r in op.results) or len(op.regions) > 0


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


# ---------------------------------------------------------------------------------------------------
# Code generation
# ---------------------------------------------------------------------------------------------------


class _Gen:
    def __init__(self, ops: list[RowOp], rows: int, options: RowsOptions, name: str):
        self.ops, self.rows, self.o, self.name = ops, rows, options, name
        self.e = Emitter()
        # One function argument per distinct buffer / scalar value.
        self.params: list[ir.Value] = []
        for op in ops:
            for v in [m.value if isinstance(m, Mem) else m for m in op.inputs] + [m.value for m in op.outputs]:
                if v not in self.params:
                    self.params.append(v)
            # Values the body captures from outside the op: operands of its ops, or yielded as they are
            # (`linalg.yield %cst` of a fill-like generic).
            for operand in [o for b in op.body for o in b.operands] + list(op.yields):
                if not _defined_in(operand, op.op) and operand not in self.params:
                    self.params.append(operand)
        self.names = {v: f"%p{i}" for i, v in enumerate(self.params)}

        self.plan_buffers()

    def plan_buffers(self) -> None:
        """Row scratch for buffers written twice or more in the group, non-temporal final stores.

        A buffer written by several ops of a fused group (softmax writes exp(x - max) into its output,
        then divides it in place) keeps its intermediate rows in a row-sized scratch that stays in L1:
        from its first write up to (excluding) the last one, every access goes to the scratch; the
        last writer reads the scratch and writes the buffer. A large buffer (>= `NT_BYTES`) whose last
        write in the group is not read again in the group is stored with non-temporal stores: memory
        then sees one write of it, not a read for ownership and a write, as memcpy does. Those stores
        need 64-byte aligned rows: checked statically (strides) and at run time (the base address,
        with a second copy of the loop nest for unaligned arrays).
        """
        self.op_index = 0
        accesses: dict = {}  # value -> [(op index, "r"/"w")]
        for i, op in enumerate(self.ops):
            for m in op.inputs:
                if isinstance(m, Mem):
                    accesses.setdefault(m.value, []).append((i, "r"))
            for m in op.outputs:
                accesses.setdefault(m.value, []).append((i, "w"))
        self.scratch: dict = {}  # value -> (first write, last write, scratch name, type)
        self.nt: dict = {}  # value -> op index of its non-temporal write
        for value, uses in accesses.items():
            writes = [i for i, kind in uses if kind == "w"]
            if not writes:
                continue
            type_ = ir.MemRefType(value.type)
            # An op reducing into `value` along a dim other than its lane accumulates through memory: it
            # reads back what it wrote, so its reads and writes must go to one place, the buffer. That holds
            # for every writer, not only the last: a first writer accumulating into a scratch would re-read
            # the buffer's original row at each step (a matmul then kept only its last term).
            if self.rows and len(writes) >= 2 and not any(_accumulates_in_memory(self.ops[w]) for w in writes):
                rest = list(type_.shape[self.rows:])
                shape = "x".join(map(str, rest)) + "x" if rest else ""
                self.scratch[value] = (writes[0], writes[-1], None, f"memref<{shape}{type_.element_type}>")
            last = writes[-1]
            reads_after = any(i > last and kind == "r" for i, kind in uses)
            element = _byte_width(type_.element_type)
            strides, _ = type_.get_strides_and_offset()
            if (not reads_after and prod(type_.shape) * element >= NT_BYTES and type_.rank
                    and strides[-1] == 1 and all(s * element % VECTOR_BYTES == 0 for s in strides[:-1])):
                op = self.ops[last]
                if op.lane is not None and any(m.value == value and m.contiguous_along(op.lane) for m in op.outputs):
                    self.nt[value] = last
        self.plan_prefetch(accesses)

    def plan_prefetch(self, accesses: dict) -> None:
        """Prefetch the next row of streamed inputs during the group's heaviest op.

        Rows are processed one after the other: while the exp of a softmax row runs on L1 data, memory
        would idle (the hardware prefetcher only runs a few lines ahead of the loads). Software prefetches
        of row r + 1, spread over the heaviest op's vector loop, overlap the two.
        """
        self.prefetch: list[Mem] = []
        self.prefetch_op = None
        if not self.rows:
            return
        heaviest = max(range(len(self.ops)), key=lambda i: (len(self.ops[i].body), -i))
        op = self.ops[heaviest]
        if op.lane is None or op.lane in op.row_prefix[: self.rows]:
            return
        seen = set()
        for i, o in enumerate(self.ops):
            prefix = tuple(o.row_prefix[: self.rows])
            for m in o.inputs:
                if not isinstance(m, Mem) or m.value in seen:
                    continue
                uses = accesses[m.value]
                if uses[0][1] != "r" or m.dims[: self.rows] != prefix or len(m.dims) != self.rows + 1:
                    continue
                if not m.contiguous_along(o.lane) or m.type.shape[-1] != op.ranges[op.lane]:
                    continue
                seen.add(m.value)
                self.prefetch.append(m)
        if self.prefetch:
            self.prefetch_op = heaviest

    def emit_prefetch(self, offset: Index, lanes: int) -> None:
        """Prefetch one vector's line of the next row of every streamed input (see plan_prefetch)."""
        e = self.e
        for m in self.prefetch:
            coords = [self.row_values[d] for d in range(self.rows)]
            coords[-1] = e.add(coords[-1], 1)
            coords.append(offset)
            e.line(f"memref.prefetch {self.names[m.value]}[{e.indices(coords)}], read, locality<3>, data : {m.type}")

    def target(self, mem: Mem, write: bool) -> tuple[str, str, tuple[int, ...], bool]:
        """Where the current op reads or writes `mem`: (name, type, dims, non-temporal)."""
        plan = self.scratch.get(mem.value)
        i = self.op_index
        if plan is not None:
            first, last, name, type_ = plan
            # reads in the first writer see the original; the last writer writes the buffer itself
            if (first < i < last) or (i == first and write) or (i == last and not write and first < last):
                return name, type_, mem.dims[self.rows:], False
        nt = self.nt_enabled and write and self.nt.get(mem.value) == i
        return self.names[mem.value], str(mem.type), mem.dims, nt

    def generate(self) -> str:
        e = self.e
        first = self.ops[0]
        row_dims = first.row_prefix[: self.rows]
        extents = [first.ranges[d] for d in row_dims]
        for value, (f, l, _, type_) in list(self.scratch.items()):
            name = e.value(f"memref.alloca() {{alignment = 64 : i64}} : {type_}", "s")
            self.scratch[value] = (f, l, name, type_)

        def nest(level: int, values: list) -> None:
            if level == self.rows:
                self.row_values = values
                for index, op in enumerate(self.ops):
                    self.op_index = index
                    fixed = dict(zip(op.row_prefix[: self.rows], values))
                    self.emit_op(op, fixed)
                return
            with e.loop(0, extents[level]) as v:
                nest(level + 1, values + [v])

        self.nt_enabled = False
        if self.nt:
            aligned = None
            for value in self.nt:
                pointer = e.value(f"memref.extract_aligned_pointer_as_index {self.names[value]} : {value.type} -> index")
                _, offset = ir.MemRefType(value.type).get_strides_and_offset()
                if ir.MemRefType(value.type).is_dynamic_stride_or_offset(offset):
                    aligned = "false"
                    break
                byte = e.add(pointer, offset * _byte_width(ir.MemRefType(value.type).element_type))
                low = e.value(f"arith.remui {e.idx(byte)}, {e.idx(VECTOR_BYTES)} : index")
                ok = e.value(f"arith.cmpi eq, {low}, {e.idx(0)} : index")
                aligned = ok if aligned is None else e.value(f"arith.andi {aligned}, {ok} : i1")
            if aligned == "false":
                self.nt = {}
                nest(0, [])
            else:
                then, otherwise = e.if_else(aligned)
                with then:
                    self.nt_enabled = True
                    nest(0, [])
                with otherwise:
                    self.nt_enabled = False
                    nest(0, [])
        else:
            nest(0, [])
        params = ", ".join(f"{self.names[v]}: {v.type}" for v in self.params)
        return "\n".join([f"func.func private @{self.name}({params}) {{", e.body(), "  return", "}"])

    # -- one op at fixed row values ----------------------------------------------------------------
    def emit_op(self, op: RowOp, fixed: dict[int, Index]) -> None:
        e = self.e
        lane = op.lane if op.lane not in fixed else None
        outer = [d for d in range(len(op.ranges)) if d not in fixed and d != lane]
        # Parallel dims outside reduction dims (any order is correct: reductions go through memory).
        outer.sort(key=lambda d: (d not in op.parallel, d))

        def nest(level: int, point: dict) -> None:
            if level == len(outer):
                self.emit_point(op, point, lane)
                return
            with e.loop(0, op.ranges[outer[level]]) as v:
                nest(level + 1, {**point, outer[level]: v})

        nest(0, dict(fixed))

    def load(self, mem: Mem, point: dict, lanes: int | None) -> str:
        e = self.e
        name, type_, dims, _ = self.target(mem, write=False)
        coords = e.indices(point[d] for d in dims)
        if lanes is None:
            return e.value(f"memref.load {name}[{coords}] : {type_}")
        return e.value(f"vector.load {name}[{coords}] : {type_}, vector<{lanes}x{mem.type.element_type}>")

    def store(self, value: str, mem: Mem, point: dict, lanes: int | None) -> None:
        e = self.e
        name, type_, dims, nt = self.target(mem, write=True)
        coords = e.indices(point[d] for d in dims)
        if lanes is None:
            e.line(f"memref.store {value}, {name}[{coords}] : {type_}")
        else:
            attrs = f" {{alignment = {VECTOR_BYTES} : i64, nontemporal = true}}" if nt else ""
            e.line(f"vector.store {value}, {name}[{coords}]{attrs} : {type_}, vector<{lanes}x{mem.type.element_type}>")

    def emit_point(self, op: RowOp, point: dict, lane: int | None) -> None:
        """The op at `point` (every dim but the lane fixed): invariant part, vector loop, remainder."""
        e = self.e
        n_in = len(op.inputs)
        out_args = op.args[n_in:]
        if lane is None:
            base = {v: n for v, n in self.names.items() if not isinstance(v.type, (ir.MemRefType, ir.UnrankedMemRefType))}
            for i, m in enumerate(op.inputs):
                if not isinstance(m, Mem):
                    base[op.args[i]] = self.names[m]
            self.emit_scalar_body(op, point, base)
            return
        reduction_ops = {r.combiner for r in op.reductions.values()}
        body_ops = [b for b in op.body if b not in reduction_ops]
        operands_used = {o for b in body_ops for o in b.operands}
        used = operands_used | set(op.yields) | {r.value for r in op.reductions.values()}
        # Which values vary along the lane.
        variant: set = set()
        if lane is not None:
            for i, m in enumerate(op.inputs):
                if isinstance(m, Mem) and m.depends(lane):
                    variant.add(op.args[i])
            for k in range(len(op.outputs)):
                if k not in op.reductions:
                    variant.add(out_args[k])
            for b in body_ops:
                if any(o in variant for o in b.operands):
                    variant.add(b.results[0])

        # Invariant values, as scalars, once per point.
        scalars: dict = {v: n for v, n in self.names.items() if not isinstance(v.type, (ir.MemRefType, ir.UnrankedMemRefType))}
        for i, m in enumerate(op.inputs):
            arg = op.args[i]
            if not isinstance(m, Mem):
                scalars[arg] = self.names[m]
            elif arg not in variant and arg in used:
                scalars[arg] = self.load(m, point, None)
        for k, m in enumerate(op.outputs):
            if out_args[k] not in variant and out_args[k] in operands_used:
                raise AssertionError("reduction accumulators are only read by their combiner")
        for b in body_ops:
            if b.results[0] not in variant:
                scalars[b.results[0]] = emit_op(e, b, scalars, None)

        lanes = op.lanes
        unroll = self.o.unroll
        total = op.ranges[lane]
        step = lanes * unroll
        main = total - total % step
        vectors_left = (total - main) // lanes
        tail_start = main + vectors_left * lanes

        # Broadcasts of invariant values that variant code (or a stored yield) needs, once per point.
        broadcasts: dict = {}
        needed = [o for b in body_ops if b.results[0] in variant for o in b.operands]
        needed += [op.yields[k] for k in range(len(op.outputs)) if k not in op.reductions]
        needed += [r.value for r in op.reductions.values()]
        for v in needed:
            if v not in variant and v not in broadcasts:
                broadcasts[v] = e.value(f"vector.broadcast {scalars[v]} : {v.type} to {vector_type(v.type, lanes)}")
        # x / d with d the same along the lane: one division per point, then multiplications
        # (vdivps costs about as much as the rest of a softmax row; results differ by <= 1 ulp).
        reciprocals: dict = {}
        for b in body_ops:
            if (b.name == "arith.divf" and b.results[0] in variant and b.operands[1] not in variant
                    and isinstance(b.results[0].type, (ir.F32Type, ir.F64Type))):
                d = b.operands[1]
                if d not in reciprocals:
                    t = d.type
                    one = e.value(f"arith.constant 1.0 : {t}")
                    inverse = e.value(f"arith.divf {one}, {scalars[d]} : {t}")
                    reciprocals[d] = e.value(f"vector.broadcast {inverse} : {t} to {vector_type(t, lanes)}")

        def body_at(offset: Index, width: int | None, accs: dict) -> dict:
            """Loads, variant body ops, stores at `offset` along the lane (a vector of `width`, or a scalar)."""
            env = dict(broadcasts) if width else dict(scalars)
            at = {**point, lane: offset}
            for i, m in enumerate(op.inputs):
                if isinstance(m, Mem) and op.args[i] in variant and op.args[i] in used:
                    env[op.args[i]] = self.load(m, at, width)
            for k, m in enumerate(op.outputs):
                if k not in op.reductions and out_args[k] in used:
                    env[out_args[k]] = self.load(m, at, width)
            for b in body_ops:
                if b.results[0] in variant:
                    if width and b.name == "arith.divf" and b.operands[1] in reciprocals:
                        t = vector_type(b.results[0].type, width)
                        env[b.results[0]] = e.value(f"arith.mulf {env[b.operands[0]]}, {reciprocals[b.operands[1]]} : {t}")
                    else:
                        env[b.results[0]] = emit_op(e, b, env, width)
            new_accs = {}
            for k, m in enumerate(op.outputs):
                if k in op.reductions:
                    red = op.reductions[k]
                    fast = width is not None and red.kind in ("maximumf", "minimumf")
                    new_accs[k] = self.combine(red, accs[k], env[red.value], width, fast=fast)
                else:
                    self.store(env[op.yields[k]], m, at, width)
            self.last_env = env
            return new_accs

        # Loop-carried vectors: `unroll` accumulators per reduction; max/min reductions also carry NaN
        # flags, so their accumulators can use the plain max/min instruction (`fast` below).
        keys = sorted(op.reductions)
        elem = {k: op.outputs[k].type.element_type for k in keys}
        nan_keys = [k for k in keys if op.reductions[k].kind in ("maximumf", "minimumf")]
        slots = [("acc", k) for k in keys] + [("nan", k) for k in nan_keys]
        false = e.value(f"arith.constant dense<false> : vector<{lanes}xi1>") if nan_keys else None
        accs = {("acc", k): [self.identity(op.reductions[k], elem[k], lanes) for _ in range(unroll)] for k in keys}
        accs |= {("nan", k): [false] * unroll for k in nan_keys}
        slot_type = {s: vector_type(elem[s[1]], lanes) if s[0] == "acc" else f"vector<{lanes}xi1>" for s in slots}

        def accumulate(offset: Index, current: dict) -> dict:
            result = body_at(offset, lanes, {k: current[("acc", k)] for k in keys})
            new = {("acc", k): result[k] for k in keys}
            for k in nan_keys:
                x = self.last_env[op.reductions[k].value]
                flags = e.value(f"arith.cmpf uno, {x}, {x} : {vector_type(elem[k], lanes)}")
                new[("nan", k)] = e.value(f"arith.ori {current[('nan', k)]}, {flags} : vector<{lanes}xi1>")
            return new

        if main:
            inits = [a for s in slots for a in accs[s]]
            types = [slot_type[s] for s in slots for _ in range(unroll)]
            if inits:
                iv, carried, out = self.open_carried(0, main, step, inits, types)
                current = {s: carried[i * unroll:(i + 1) * unroll] for i, s in enumerate(slots)}
                for u in range(unroll):
                    if self.prefetch_op == self.op_index:
                        self.emit_prefetch(e.add(iv, u * lanes), lanes)
                    result = accumulate(e.add(iv, u * lanes), {s: current[s][u] for s in slots})
                    for s in slots:
                        current[s][u] = result[s]
                self.close_carried([a for s in slots for a in current[s]], types)
                accs = {s: [f"{out}#{i * unroll + u}" for u in range(unroll)] for i, s in enumerate(slots)}
            else:
                with e.loop(0, main, step) as iv:
                    for u in range(unroll):
                        if self.prefetch_op == self.op_index:
                            self.emit_prefetch(e.add(iv, u * lanes), lanes)
                        body_at(e.add(iv, u * lanes), lanes, {})
        for v in range(vectors_left):
            result = accumulate(main + v * lanes, {s: accs[s][v % unroll] for s in slots})
            for s in slots:
                accs[s][v % unroll] = result[s]
        # Horizontal reduction of the vector accumulators, then the scalar remainder.
        totals = {}
        for k in keys:
            red = op.reductions[k]
            vectors = accs[("acc", k)]
            while len(vectors) > 1:
                vectors = [self.combine(red, vectors[i], vectors[i + 1], lanes) if i + 1 < len(vectors) else vectors[i]
                           for i in range(0, len(vectors), 2)]
            # Floats: the accumulators already reassociated the reduction, so the horizontal step may too
            # (a shuffle tree instead of 15 dependent scalar ops); max/min NaNs are tracked apart.
            flags = ""
            if not isinstance(elem[k], ir.IntegerType):
                flags = " fastmath<nnan,nsz,reassoc>" if k in nan_keys else " fastmath<reassoc>"
            totals[k] = e.value(f"vector.reduction <{red.kind}>, {vectors[0]}{flags} : {vector_type(elem[k], lanes)} into {elem[k]}")
            if k in nan_keys:
                flags = accs[("nan", k)]
                while len(flags) > 1:
                    flags = [e.value(f"arith.ori {flags[i]}, {flags[i + 1]} : vector<{lanes}xi1>") if i + 1 < len(flags) else flags[i]
                             for i in range(0, len(flags), 2)]
                any_nan = e.value(f"vector.reduction <or>, {flags[0]} : vector<{lanes}xi1> into i1")
                nan = e.value(f"arith.constant {'0x7FC00000' if str(elem[k]) == 'f32' else '0x7FF8000000000000'} : {elem[k]}")
                totals[k] = e.value(f"arith.select {any_nan}, {nan}, {totals[k]} : {elem[k]}")
        for j in range(tail_start, total):
            totals.update(body_at(j, None, totals))
        for k in keys:
            red = op.reductions[k]
            old = self.load(op.outputs[k], point, None)
            self.store(self.combine(red, old, totals[k], None), op.outputs[k], point, None)

    def emit_scalar_body(self, op: RowOp, point: dict, scalars: dict) -> None:
        """An op with no lane left (all its dims are rows): scalar code at the point."""
        e = self.e
        env = dict(scalars)
        n_in = len(op.inputs)
        used = {o for b in op.body for o in b.operands} | set(op.yields)
        for i, m in enumerate(op.inputs):
            if isinstance(m, Mem) and op.args[i] in used and op.args[i] not in env:
                env[op.args[i]] = self.load(m, point, None)
        for k, m in enumerate(op.outputs):
            if op.args[n_in + k] in used:
                env[op.args[n_in + k]] = self.load(m, point, None)
        for b in op.body:
            if b.results[0] not in env:
                env[b.results[0]] = emit_op(e, b, env, None)
        for k, m in enumerate(op.outputs):
            self.store(env[op.yields[k]], m, point, None)

    def identity(self, red: Reduction, element: ir.Type, lanes: int) -> str:
        identity = red.identity
        if isinstance(element, ir.IntegerType):
            width = element.width
            value = {"min": -(1 << (width - 1)), "max": (1 << (width - 1)) - 1, "umax": -1}.get(identity, identity)
        else:
            value = {"-inf": "0xFF800000" if str(element) == "f32" else "0xFFF0000000000000",
                     "inf": "0x7F800000" if str(element) == "f32" else "0x7FF0000000000000"}.get(identity, repr(float(identity)))
        return self.e.value(f"arith.constant dense<{value}> : {vector_type(element, lanes)}")

    def combine(self, red: Reduction, a: str, b: str, lanes: int | None, fast: bool = False) -> str:
        """combine(a, b) with the reduction's op; `fast`: no NaN / signed-zero care (max/min
        accumulators whose NaNs are tracked apart: one vmaxps instead of six instructions)."""
        op = red.combiner
        attrs = ", ".join(f"{n} = {op.attributes[n]}" for n in op.attributes if not (fast and n == "fastmath"))
        if fast:
            attrs = ", ".join(filter(None, [attrs, "fastmath = #arith.fastmath<nnan,nsz>"]))
        t = vector_type(op.results[0].type, lanes)
        return self.e.value(f'"{op.name}"({a}, {b}) {{{attrs}}} : ({t}, {t}) -> ({t})')

    def open_carried(self, lo, hi, step, inits, types):
        e = self.e
        iv = e.fresh("k")
        tag = iv[1:]
        carried = [f"%{tag}_a{i}" for i in range(len(inits))]
        out = e.fresh("r")
        args = ", ".join(f"{c} = {v}" for c, v in zip(carried, inits))
        e.line(f"{out}:{len(inits)} = scf.for {iv} = {e.idx(lo)} to {e.idx(hi)} step {e.idx(step)} iter_args({args}) -> ({', '.join(types)}) {{")
        e.depth += 1
        return iv, carried, out

    def close_carried(self, results, types):
        e = self.e
        e.line(f"scf.yield {', '.join(results)} : {', '.join(types)}")
        e.depth -= 1
        e.line("}")


def _accumulates_in_memory(row: RowOp) -> bool:
    """Does `row` reduce along a dim that is not its lane (re-reading its output at every step)?"""
    kinds = ["reduction" in str(a) for a in ir.ArrayAttr(row.op.attributes["iterator_types"])] \
        if "iterator_types" in row.op.attributes else []
    return any(is_reduction and d != row.lane for d, is_reduction in enumerate(kinds))


def _defined_in(value: ir.Value, op: ir.Operation) -> bool:
    """Whether `value` is defined inside `op`'s region (a block argument or a body result)."""
    if isinstance(value, ir.BlockArgument):
        return value.owner.owner.operation == op.operation
    parent = value.owner.operation.parent
    return parent is not None and parent.operation == op.operation


# ---------------------------------------------------------------------------------------------------
# The pipeline step
# ---------------------------------------------------------------------------------------------------


def _blocks(root: ir.Operation) -> list[ir.Block]:
    found: list[ir.Block] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        for region in op.regions:
            for block in region.blocks:
                found.append(block)
        return ir.WalkResult.ADVANCE

    root.walk(visit)
    return found


def rows_module(module: ir.Module, options: RowsOptions = RowsOptions()) -> list[str]:
    """Replace every row-wise op group of `module` by a call to a generated vector loop nest.

    Returns one line per group (its ops and row count).
    """
    context = module.context
    avx512 = module_avx512(module)
    groups = []
    for block in _blocks(module.operation):
        groups += find_groups(block)
    if not groups:
        return []
    texts = []
    for index, (ops, rows) in enumerate(groups):
        gen = _Gen(ops, rows, options, f"__slicer_rows_{index}")
        gen.e.avx512 = avx512
        texts.append((gen, gen.generate()))
    generated = ir.Module.parse("\n".join(t for _, t in texts), context)
    for fn in list(generated.body.operations):
        module.body.append(fn.operation)
    report = []
    for index, ((ops, rows), (gen, _)) in enumerate(zip(groups, texts)):
        last = ops[-1].op
        with ir.InsertionPoint(last), last.location:
            func_d.CallOp([], ir.FlatSymbolRefAttr.get(gen.name), list(gen.params))
        for op in ops:
            op.op.erase()
        report.append(f"@{gen.name}: {len(ops)} op(s), {rows} row dim(s)")
    return report
