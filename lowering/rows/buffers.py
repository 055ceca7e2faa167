"""Where a fused row group's ops read and write: its parameters, row scratch, non-temporal stores, prefetches.

`RowBuffers` holds the state the group's code generation shares: one function parameter per distinct
buffer or captured scalar, the row-sized scratch of buffers written twice or more, the buffers stored
with non-temporal stores, the inputs prefetched a row ahead; `load`/`store` go to the right place.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from mlir import ir

from slicer.core.linalg_facts import REDUCTION, defined_in, iterator_kinds
from slicer.core.passes import OptionError

from ..emitter import Emitter, Index
from ..memref_facts import NT_BYTES, VECTOR_BYTES, MemAccess, byte_width
from .analysis import RowOp


@dataclass(frozen=True)
class RowsOptions:
    """Vector loops unrolled `unroll` times (and as many accumulators per reduction)."""

    unroll: int = 4

    def __post_init__(self) -> None:
        if self.unroll < 1:
            raise OptionError("slicer-kernel-rows: unroll must be >= 1")


class RowBuffers:
    """A row group's parameters and buffer plan, and the loads and stores that follow it."""

    # Set by the emitter (rows/emit.py) as it walks the rows: the current rows' index values, and whether the
    # stores it marked non-temporal are on (their buffers' alignment checked at run time).
    row_values: list[Index]
    nt_enabled: bool

    def __init__(self, ops: list[RowOp], rows: int, options: RowsOptions, name: str):
        self.ops, self.rows, self.o, self.name = ops, rows, options, name
        self.e = Emitter()
        # One function argument per distinct buffer / scalar value.
        self.params: list[ir.Value] = []
        for op in ops:
            for v in [m.value if isinstance(m, MemAccess) else m for m in op.inputs] + [m.value for m in op.outputs]:
                if v not in self.params:
                    self.params.append(v)
            # Values the body captures from outside the op: operands of its ops, or yielded as they are
            # (`linalg.yield %cst` of a fill-like generic).
            for operand in [o for b in op.body for o in b.operands] + list(op.yields):
                if not defined_in(operand, op.op) and operand not in self.params:
                    self.params.append(operand)
        self.names = {v: f"%p{i}" for i, v in enumerate(self.params)}
        # Buffers whose accesses go elsewhere for a while: value -> (name, type, dims) (cascade.py's scratch).
        self.redirect: dict = {}

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
                if isinstance(m, MemAccess):
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
            element = byte_width(type_.element_type)
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
        self.prefetch: list[MemAccess] = []
        self.prefetch_op = None
        if not self.rows:
            return
        heaviest = max(range(len(self.ops)), key=lambda i: (len(self.ops[i].body), -i))
        op = self.ops[heaviest]
        if op.lane is None or op.lane in op.row_prefix[: self.rows]:
            return
        seen = set()
        for o in self.ops:
            prefix = tuple(o.row_prefix[: self.rows])
            for m in o.inputs:
                if not isinstance(m, MemAccess) or m.value in seen:
                    continue
                uses = accesses[m.value]
                if uses[0][1] != "r" or m.dims[: self.rows] != prefix or len(m.dims) != self.rows + 1:
                    continue
                if o.lane is None or not m.contiguous_along(o.lane) or m.type.shape[-1] != op.ranges[op.lane]:
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

    def target(self, mem: MemAccess, write: bool) -> tuple[str, str, tuple[int, ...], bool]:
        """Where the current op reads or writes `mem`: (name, type, dims, non-temporal)."""
        if mem.value in self.redirect:
            return (*self.redirect[mem.value], False)
        plan = self.scratch.get(mem.value)
        i = self.op_index
        if plan is not None:
            first, last, name, type_ = plan
            # reads in the first writer see the original; the last writer writes the buffer itself
            if (first < i < last) or (i == first and write) or (i == last and not write and first < last):
                return name, type_, mem.dims[self.rows:], False
        nt = self.nt_enabled and write and self.nt.get(mem.value) == i
        return self.names[mem.value], str(mem.type), mem.dims, nt


    def load(self, mem: MemAccess, point: dict, lanes: int | None) -> str:
        e = self.e
        name, type_, dims, _ = self.target(mem, write=False)
        coords = e.indices(point[d] for d in dims)
        if lanes is None:
            return e.value(f"memref.load {name}[{coords}] : {type_}")
        return e.value(f"vector.load {name}[{coords}] : {type_}, vector<{lanes}x{mem.type.element_type}>")

    def store(self, value: str, mem: MemAccess, point: dict, lanes: int | None) -> None:
        e = self.e
        name, type_, dims, nt = self.target(mem, write=True)
        coords = e.indices(point[d] for d in dims)
        if lanes is None:
            e.line(f"memref.store {value}, {name}[{coords}] : {type_}")
        else:
            attrs = f" {{alignment = {VECTOR_BYTES} : i64, nontemporal = true}}" if nt else ""
            e.line(f"vector.store {value}, {name}[{coords}]{attrs} : {type_}, vector<{lanes}x{mem.type.element_type}>")



def _accumulates_in_memory(row: RowOp) -> bool:
    """Does `row` reduce along a dim that is not its lane (re-reading its output at every step)?"""
    return any(kind == REDUCTION and d != row.lane for d, kind in enumerate(iterator_kinds(row.op)))
