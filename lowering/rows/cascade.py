"""Additive float reductions over outer (non-lane) dims summed in a cascade of blocks, as torch's sum is.

A row op reducing along dims other than its lane (a column sum's rows; a whole-tensor sum's or BatchNorm's
statistics' outer dims, whose lane loop yields one partial sum per point) used to add every point into
its output in turn: one chain of R additions per output element, whose rounding error grows like sqrt(R)
(9x torch's for a column sum over 1024 rows, 14x over 4096). Here the outer reduction iterations are
summed in blocks of `CASCADE_BLOCK` into a zeroed scratch, each block's sum added to the next level's
scratch, and so on up to the output: the chain at every level has at most `CASCADE_BLOCK` terms, so the
error grows like log(R), which is what torch's `cascade_sum` (blocks of 16) and numpy's pairwise sum get.

The iterations are linearized over the reduction dims in loop order: a dim longer than the block is
split into nested loops of at most `CASCADE_BLOCK` trips (`[i, min(i + 16**(j+1), n))` step `16**j`;
a dim of at most `UNSPLIT_EXTENT` stays one loop), and consecutive loops whose trips multiply to at most
the block share one level. The scratch of a level is the output's part the nest covers at one parallel point: a row
along the lane (a column sum) or one scalar (the lane is reduced, or fixed by the group's rows). It is allocated on the
stack at function entry, and only where it stays small (`CASCADE_SCRATCH_BYTES`); an op past that keeps the single
chain.

Details: docs/module-notes.md, `lowering/rows/cascade.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from mlir import ir
from mlir.dialects import arith

from slicer.core.errors import InternalError
from slicer.core.linalg_facts import combined_with

from ..emitter import Emitter, Index
from ..memref_facts import MemAccess, byte_width
from .analysis import Reduction, RowOp
from .point import PointEmitter

CASCADE_BLOCK = 16
"""The most terms a chain of the cascade adds (torch's `cascade_sum` uses 16 too)."""

UNSPLIT_EXTENT = 2 * CASCADE_BLOCK
"""A dim this short stays one loop (its own level): a chain of up to 32 terms costs little accuracy, where
splitting it would cost a second, clipped loop (BatchNorm's 28 rows)."""

CASCADE_SCRATCH_BYTES = 64 * 1024
"""The most stack scratch one op's cascade may take (its levels' rows); past it the op keeps one chain."""

_FLOATS = (ir.F16Type, ir.BF16Type, ir.F32Type, ir.F64Type)


@dataclass(frozen=True)
class _Loop:
    """One loop of the cascade nest: `dim` from the enclosing loop of the same dim (or 0) over `span`
    elements (clipped to the dim's extent) in steps of `step`."""

    dim: int
    step: int
    span: int
    extent: int

    @property
    def trips(self) -> int:
        return -(-min(self.span, self.extent) // self.step)


@dataclass
class Cascade:
    """One op's cascade: its levels (outermost first, each a run of loops), the outputs summed in a cascade
    (index, combiner) and each level's scratch per output (all but the outermost level, which sums into the
    output itself), and the scratch's dim (the lane, when the output has it) and type."""

    levels: list[list[_Loop]]
    outputs: list[tuple[int, ir.Operation]]
    lane: int | None
    types: dict[int, str]
    scratch: dict[tuple[int, int], str]  # (level, output) -> name


def _loops(dim: int, extent: int) -> list[_Loop]:
    """`dim`'s loops, outermost first, each with at most `CASCADE_BLOCK` trips (or one up to `UNSPLIT_EXTENT`)."""
    if extent <= UNSPLIT_EXTENT:
        return [_Loop(dim, 1, extent, extent)]
    levels = 1
    while CASCADE_BLOCK ** levels < extent:
        levels += 1
    return [_Loop(dim, CASCADE_BLOCK ** j, extent if j == levels - 1 else CASCADE_BLOCK ** (j + 1), extent)
            for j in reversed(range(levels))]


def _summed_outputs(op: RowOp) -> list[tuple[int, ir.Operation]]:
    """The outputs that are float additions `out + x` with `out` read nowhere else (and not an input too)."""
    found = []
    inputs = {m.value for m in op.inputs if isinstance(m, MemAccess)}
    n_in = len(op.inputs)
    for k, out in enumerate(op.outputs):
        if not isinstance(out.type.element_type, _FLOATS) or out.value in inputs:
            continue
        out_arg = op.args[n_in + k]
        pair = combined_with(op.yields[k], out_arg)
        if pair is None or pair[0].name != arith.AddFOp.OPERATION_NAME:
            continue
        if any(b != pair[0] and out_arg in list(b.operands) for b in op.body):
            continue
        found.append((k, pair[0]))
    return found


def plan_cascade(op: RowOp, fixed: set[int]) -> Cascade | None:
    """The cascade of `op` run with the dims `fixed` (the group's rows), or None when it needs none."""
    lane = op.lane if op.lane not in fixed else None
    reduced = sorted(d for d in range(len(op.ranges)) if d not in fixed and d != lane and d not in op.parallel)
    if prod(op.ranges[d] for d in reduced) <= CASCADE_BLOCK:
        return None
    outputs = _summed_outputs(op)
    if not outputs or any(d in op.outputs[k].dims for k, _ in outputs for d in reduced):
        return None
    loops = [loop for d in reduced for loop in _loops(d, op.ranges[d])]
    levels: list[list[_Loop]] = [[]]
    trips = 1
    for loop in reversed(loops):
        if levels[-1] and trips * loop.trips > CASCADE_BLOCK:
            levels.append([])
            trips = 1
        levels[-1].insert(0, loop)
        trips *= loop.trips
    levels.reverse()
    if len(levels) == 1:
        return None
    scratch_lane = lane if lane in op.parallel else None  # a parallel lane is in every output (analyze)
    length = op.ranges[scratch_lane] if scratch_lane is not None else 1
    types = {}
    for k, _ in outputs:
        element = op.outputs[k].type.element_type
        types[k] = f"memref<{length}x{element}>" if scratch_lane is not None else f"memref<{element}>"
    size = sum(length * _float_bytes(op.outputs[k].type.element_type) for k, _ in outputs) * (len(levels) - 1)
    if size > CASCADE_SCRATCH_BYTES:
        return None
    return Cascade(levels, outputs, scratch_lane, types, {})


def _float_bytes(type_: ir.Type) -> int:
    """Bytes of one element of a float output summed in a cascade (`_summed_outputs` takes float additions only)."""
    width = byte_width(type_)
    if width is None:
        raise InternalError(f"a cascade sums an output of {type_}, not a float")
    return width


class CascadeEmitter(PointEmitter):
    """Emits an op's outer reduction dims as a cascade (see the module docstring)."""

    def allocate_cascade(self, op: RowOp, cascade: Cascade) -> None:
        """The scratch of every level but the outermost, on the stack and zeroed at function entry (before any
        loop); a level's sum is added into the next one out with one sweep that zeroes it again."""
        for level in range(1, len(cascade.levels)):
            for k, _ in cascade.outputs:
                cascade.scratch[(level, k)] = self.e.value(
                    f"memref.alloca() {{alignment = 64 : i64}} : {cascade.types[k]}", "s")
            self._sweep(op, cascade, {}, level, into=None)

    def emit_cascade(self, op: RowOp, cascade: Cascade, point: dict, level: int = 0) -> None:
        """Level `level`'s loops of `op`'s reduction nest at `point` (its parallel dims fixed). In each
        iteration the next level is summed into its (zero) scratch, which is then added into this level's
        sum (the output itself at level 0) and zeroed; the innermost level runs the op, its sums redirected."""
        e, loops = self.e, cascade.levels[level]

        def nest(i: int, point: dict) -> None:
            if i < len(loops):
                loop = loops[i]
                lo = 0 if loop.span >= loop.extent else point[loop.dim]  # within the dim's enclosing loop
                with e.loop(lo, _clipped(e, lo, loop), loop.step) as iv:
                    nest(i + 1, {**point, loop.dim: iv})
            elif level == len(cascade.levels) - 1:
                dims = (cascade.lane,) if cascade.lane is not None else ()
                saved = self.redirect
                self.redirect = {op.outputs[k].value: (cascade.scratch[(level, k)], cascade.types[k], dims)
                                 for k, _ in cascade.outputs}
                try:
                    self.emit_point(op, point, op.lane if op.lane not in point else None)
                finally:
                    self.redirect = saved
            else:
                self.emit_cascade(op, cascade, point, level + 1)
                self._sweep(op, cascade, point, level + 1, into=level)

        nest(0, point)

    def _sweep(self, op: RowOp, cascade: Cascade, point: dict, level: int, into: int | None) -> None:
        """Zero level `level`'s scratch (`into` None), or add it into level `into`'s sum and zero it."""
        e = self.e
        length = op.ranges[cascade.lane] if cascade.lane is not None else 1
        lanes = min(op.lanes, length) if cascade.lane is not None else None
        main = length - length % lanes if lanes else 0
        for k, combiner in cascade.outputs:
            mem, red = op.outputs[k], Reduction(combiner, "add", 0.0, None)
            scratch = _Scratch(e, cascade.types[k], str(mem.type.element_type), cascade.lane is not None)

            def one(offset: Index, width: int | None, k=k, mem=mem, red=red, scratch=scratch) -> None:
                here = cascade.scratch[(level, k)]
                part = None if into is None else scratch.load(here, offset, width)
                scratch.store(e.value(f"arith.constant {'dense<0.0>' if width else '0.0'} : {scratch.vtype(width)}"),
                              here, offset, width)
                if into is None or part is None:
                    return
                if into == 0:
                    at = {**point, cascade.lane: offset} if cascade.lane is not None else point
                    self.store(self.combine(red, self.load(mem, at, width), part, width), mem, at, width)
                else:
                    there = cascade.scratch[(into, k)]
                    scratch.store(self.combine(red, scratch.load(there, offset, width), part, width), there, offset,
                                  width)

            if main and lanes:
                with e.loop(0, main, lanes) as j:
                    one(j, lanes)
            for j in range(main, length):
                one(j, None)


@dataclass
class _Scratch:
    """Loads and stores of one output's cascade scratch (a row along the lane, or a 0-d buffer)."""

    e: Emitter
    type_: str
    element: str
    along_lane: bool

    def vtype(self, width: int | None) -> str:
        return f"vector<{width}x{self.element}>" if width else self.element

    def _at(self, offset: Index) -> str:
        return self.e.idx(offset) if self.along_lane else ""

    def load(self, name: str, offset: Index, width: int | None) -> str:
        if width:
            return self.e.value(f"vector.load {name}[{self._at(offset)}] : {self.type_}, {self.vtype(width)}")
        return self.e.value(f"memref.load {name}[{self._at(offset)}] : {self.type_}")

    def store(self, value: str, name: str, offset: Index, width: int | None) -> None:
        if width:
            self.e.line(f"vector.store {value}, {name}[{self._at(offset)}] : {self.type_}, {self.vtype(width)}")
        else:
            self.e.line(f"memref.store {value}, {name}[{self._at(offset)}] : {self.type_}")


def _clipped(e, lo: Index, loop: _Loop) -> Index:
    """`min(lo + span, extent)`, without the min when the span always fits."""
    if loop.span >= loop.extent:
        return loop.extent
    hi = e.add(lo, loop.span)
    return hi if loop.extent % loop.span == 0 else e.min(hi, loop.extent)
