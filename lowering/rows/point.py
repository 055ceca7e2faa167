"""One row op at one point (every dim but the lane fixed): invariant part, unrolled vector loop, remainder.

Body values that do not depend on the lane (a row's max, a bias column, constants) are computed once
per point, as scalars, and broadcast where vector code needs them. The lane loop runs on vectors of
`lanes` elements, unrolled `unroll` times; reductions along the lane keep `unroll` vector
accumulators, reduced horizontally once (`vector.reduction`), then a static scalar remainder.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith

from slicer.core.names import FASTMATH_ATTR

from ..body import emit_op, vector_type
from ..emitter import Index
from ..memref_facts import MemAccess
from .analysis import Reduction, RowOp
from .buffers import RowBuffers

_NAN_TRACKED = ("maximumf", "minimumf")
"""Reduction kinds whose vector accumulators use the plain max/min instruction, NaNs tracked apart."""


class PointEmitter(RowBuffers):
    """Emits row ops at points of the group's loop nest (see `_Point` for the vectorized case)."""

    def emit_point(self, op: RowOp, point: dict, lane: int | None) -> None:
        """The op at `point` (every dim but the lane fixed): invariant part, vector loop, remainder."""
        if lane is None:
            base = {v: n for v,
                    n in self.names.items() if not isinstance(v.type, (ir.MemRefType, ir.UnrankedMemRefType))}
            for i, m in enumerate(op.inputs):
                if not isinstance(m, MemAccess):
                    base[op.args[i]] = self.names[m]
            self.emit_scalar_body(op, point, base)
            return
        _Point(self, op, point, lane).emit()

    def emit_scalar_body(self, op: RowOp, point: dict, scalars: dict) -> None:
        """An op with no lane left (all its dims are rows): scalar code at the point."""
        e = self.e
        env = dict(scalars)
        n_in = len(op.inputs)
        used = {o for b in op.body for o in b.operands} | set(op.yields)
        for i, m in enumerate(op.inputs):
            if isinstance(m, MemAccess) and op.args[i] in used and op.args[i] not in env:
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
        value: int | str
        if isinstance(element, ir.IntegerType):
            width = element.width
            extremes = {"min": -(1 << (width - 1)), "max": (1 << (width - 1)) - 1, "umax": -1}
            value = extremes[identity] if isinstance(identity, str) else int(identity)
        else:
            infinities = {
                "-inf": "0xFF800000" if str(element) == "f32" else "0xFFF0000000000000",
                "inf": "0x7F800000" if str(element) == "f32" else "0x7FF0000000000000",
            }
            value = infinities[identity] if isinstance(identity, str) else repr(float(identity))
        return self.e.value(f"arith.constant dense<{value}> : {vector_type(element, lanes)}")

    def combine(self, red: Reduction, a: str, b: str, lanes: int | None, fast: bool = False) -> str:
        """combine(a, b) with the reduction's op; `fast`: no NaN / signed-zero care (max/min
        accumulators whose NaNs are tracked apart: one vmaxps instead of six instructions)."""
        op = red.combiner
        attrs = ", ".join(f"{n} = {op.attributes[n]}" for n in op.attributes if not (fast and n == FASTMATH_ATTR))
        if fast:
            attrs = ", ".join(filter(None, [attrs, f"{FASTMATH_ATTR} = #arith.fastmath<nnan,nsz>"]))
        t = vector_type(op.results[0].type, lanes)
        return self.e.value(f'"{op.name}"({a}, {b}) {{{attrs}}} : ({t}, {t}) -> ({t})')

    def open_carried(self, lo, hi, step, inits, types):
        e = self.e
        iv = e.fresh("k")
        tag = iv[1:]
        carried = [f"%{tag}_a{i}" for i in range(len(inits))]
        out = e.fresh("r")
        args = ", ".join(f"{c} = {v}" for c, v in zip(carried, inits))
        e.line(f"{out}:{len(inits)} = scf.for {iv} = {e.idx(lo)} to {e.idx(hi)} step {e.idx(step)} iter_args({args}) "
               f"-> ({', '.join(types)}) {{")
        e.depth += 1
        return iv, carried, out

    def close_carried(self, results, types):
        e = self.e
        e.line(f"scf.yield {', '.join(results)} : {', '.join(types)}")
        e.depth -= 1
        e.line("}")


class _Point:
    """One op at one point with a lane: which values vary along it, and the code of each part of the loop."""

    def __init__(self, gen: PointEmitter, op: RowOp, point: dict, lane: int):
        self.gen, self.e, self.op, self.point, self.lane = gen, gen.e, op, point, lane
        self.out_args = op.args[len(op.inputs):]
        reduction_ops = {r.combiner for r in op.reductions.values()}
        self.body_ops = [b for b in op.body if b not in reduction_ops]
        self.operands_used = {o for b in self.body_ops for o in b.operands}
        self.used = self.operands_used | set(op.yields) | {r.value for r in op.reductions.values()}
        self.variant = self._variant()
        self.last_env: dict = {}

    def _variant(self) -> set:
        """The values that vary along the lane: lane-dependent inputs, non-reduced outputs, what they feed."""
        op, variant = self.op, set()
        for i, m in enumerate(op.inputs):
            if isinstance(m, MemAccess) and m.depends(self.lane):
                variant.add(op.args[i])
        for k in range(len(op.outputs)):
            if k not in op.reductions:
                variant.add(self.out_args[k])
        for b in self.body_ops:
            if any(o in variant for o in b.operands):
                variant.add(b.results[0])
        return variant

    def _invariants(self) -> dict:
        """Invariant values, as scalars, once per point."""
        gen, op, variant = self.gen, self.op, self.variant
        scalars = {v: n for v, n in gen.names.items() if not isinstance(v.type, (ir.MemRefType, ir.UnrankedMemRefType))}
        for i, m in enumerate(op.inputs):
            arg = op.args[i]
            if not isinstance(m, MemAccess):
                scalars[arg] = gen.names[m]
            elif arg not in variant and arg in self.used:
                scalars[arg] = gen.load(m, self.point, None)
        for k in range(len(op.outputs)):
            assert self.out_args[k] in variant or self.out_args[k] not in self.operands_used, \
                "reduction accumulators are only read by their combiner"
        for b in self.body_ops:
            if b.results[0] not in variant:
                scalars[b.results[0]] = emit_op(self.e, b, scalars, None)
        return scalars

    def _broadcasts(self) -> None:
        """Broadcasts of invariant values that variant code (or a stored yield) needs, once per point; and
        for x / d with d the same along the lane, one division per point, then multiplications (vdivps
        costs about as much as the rest of a softmax row; results differ by <= 1 ulp)."""
        e, op, variant, lanes = self.e, self.op, self.variant, self.op.lanes
        self.broadcasts: dict = {}
        needed = [o for b in self.body_ops if b.results[0] in variant for o in b.operands]
        needed += [op.yields[k] for k in range(len(op.outputs)) if k not in op.reductions]
        needed += [r.value for r in op.reductions.values()]
        for v in needed:
            if v not in variant and v not in self.broadcasts:
                self.broadcasts[v] = e.value(f"vector.broadcast {self.scalars[v]} : {v.type} to "
                                             f"{vector_type(v.type, lanes)}")
        self.reciprocals: dict = {}
        for b in self.body_ops:
            if (b.name == arith.DivFOp.OPERATION_NAME and b.results[0] in variant and b.operands[1] not in variant
                    and isinstance(b.results[0].type, (ir.F32Type, ir.F64Type))):
                d = b.operands[1]
                if d not in self.reciprocals:
                    t = d.type
                    one = e.value(f"arith.constant 1.0 : {t}")
                    inverse = e.value(f"arith.divf {one}, {self.scalars[d]} : {t}")
                    self.reciprocals[d] = e.value(f"vector.broadcast {inverse} : {t} to {vector_type(t, lanes)}")

    def body_at(self, offset: Index, width: int | None, accs: dict) -> dict:
        """Loads, variant body ops, stores at `offset` along the lane (a vector of `width`, or a scalar)."""
        gen, e, op, variant = self.gen, self.e, self.op, self.variant
        env = dict(self.broadcasts) if width else dict(self.scalars)
        at = {**self.point, self.lane: offset}
        for i, m in enumerate(op.inputs):
            if isinstance(m, MemAccess) and op.args[i] in variant and op.args[i] in self.used:
                env[op.args[i]] = gen.load(m, at, width)
        for k, m in enumerate(op.outputs):
            if k not in op.reductions and self.out_args[k] in self.used:
                env[self.out_args[k]] = gen.load(m, at, width)
        for b in self.body_ops:
            if b.results[0] in variant:
                if width and b.name == arith.DivFOp.OPERATION_NAME and b.operands[1] in self.reciprocals:
                    t = vector_type(b.results[0].type, width)
                    env[b.results[0]] = e.value(f"arith.mulf {env[b.operands[0]]}, "
                                                f"{self.reciprocals[b.operands[1]]} : {t}")
                else:
                    env[b.results[0]] = emit_op(e, b, env, width)
        new_accs = {}
        for k, m in enumerate(op.outputs):
            if k in op.reductions:
                red = op.reductions[k]
                fast = width is not None and red.kind in _NAN_TRACKED
                new_accs[k] = gen.combine(red, accs[k], env[red.value], width, fast=fast)
            else:
                gen.store(env[op.yields[k]], m, at, width)
        self.last_env = env
        return new_accs

    def _accumulators(self) -> None:
        """Loop-carried vectors: `unroll` accumulators per reduction; max/min reductions also carry NaN
        flags, so their accumulators can use the plain max/min instruction (`fast` in body_at)."""
        e, op, lanes, unroll = self.e, self.op, self.op.lanes, self.gen.o.unroll
        keys = self.keys = sorted(op.reductions)
        elem = self.elem = {k: op.outputs[k].type.element_type for k in keys}
        nan_keys = self.nan_keys = [k for k in keys if op.reductions[k].kind in _NAN_TRACKED]
        slots = self.slots = [("acc", k) for k in keys] + [("nan", k) for k in nan_keys]
        accs = {("acc", k): [self.gen.identity(op.reductions[k], elem[k], lanes) for _ in range(unroll)] for k in keys}
        if nan_keys:
            false = e.value(f"arith.constant dense<false> : vector<{lanes}xi1>")
            accs |= {("nan", k): [false] * unroll for k in nan_keys}
        self.accs = accs
        self.slot_type = {s: vector_type(elem[s[1]], lanes) if s[0] == "acc" else f"vector<{lanes}xi1>" for s in slots}

    def accumulate(self, offset: Index, current: dict) -> dict:
        """One vector step at `offset`: the new accumulators and NaN flags of every slot."""
        e, lanes = self.e, self.op.lanes
        result = self.body_at(offset, lanes, {k: current[("acc", k)] for k in self.keys})
        new = {("acc", k): result[k] for k in self.keys}
        for k in self.nan_keys:
            x = self.last_env[self.op.reductions[k].value]
            flags = e.value(f"arith.cmpf uno, {x}, {x} : {vector_type(self.elem[k], lanes)}")
            new[("nan", k)] = e.value(f"arith.ori {current[('nan', k)]}, {flags} : vector<{lanes}xi1>")
        return new

    def _main_loop(self, main: int, step: int) -> None:
        """The unrolled vector loop over [0, main), carrying the accumulators when there are any."""
        gen, e, lanes, unroll, slots = self.gen, self.e, self.op.lanes, self.gen.o.unroll, self.slots
        inits = [a for s in slots for a in self.accs[s]]
        types = [self.slot_type[s] for s in slots for _ in range(unroll)]
        if not inits:
            with e.loop(0, main, step) as iv:
                for u in range(unroll):
                    if gen.prefetch_op == gen.op_index:
                        gen.emit_prefetch(e.add(iv, u * lanes), lanes)
                    self.body_at(e.add(iv, u * lanes), lanes, {})
            return
        iv, carried, out = gen.open_carried(0, main, step, inits, types)
        current = {s: carried[i * unroll:(i + 1) * unroll] for i, s in enumerate(slots)}
        for u in range(unroll):
            if gen.prefetch_op == gen.op_index:
                gen.emit_prefetch(e.add(iv, u * lanes), lanes)
            result = self.accumulate(e.add(iv, u * lanes), {s: current[s][u] for s in slots})
            for s in slots:
                current[s][u] = result[s]
        gen.close_carried([a for s in slots for a in current[s]], types)
        self.accs = {s: [f"{out}#{i * unroll + u}" for u in range(unroll)] for i, s in enumerate(slots)}

    def _horizontal(self) -> dict:
        """Each reduction's vector accumulators combined into one scalar (NaN if a NaN was seen)."""
        e, lanes, totals = self.e, self.op.lanes, {}
        for k in self.keys:
            red, elem = self.op.reductions[k], self.elem[k]
            vectors = self.accs[("acc", k)]
            while len(vectors) > 1:
                vectors = [self.gen.combine(red, vectors[i], vectors[i + 1],
                                            lanes) if i + 1 < len(vectors) else vectors[i]
                           for i in range(0, len(vectors), 2)]
            # Floats: the accumulators already reassociated the reduction, so the horizontal step may too
            # (a shuffle tree instead of 15 dependent scalar ops); max/min NaNs are tracked apart.
            flags = ""
            if not isinstance(elem, ir.IntegerType):
                flags = " fastmath<nnan,nsz,reassoc>" if k in self.nan_keys else " fastmath<reassoc>"
            totals[k] = e.value(f"vector.reduction <{red.kind}>, {vectors[0]}{flags} : "
                                f"{vector_type(elem, lanes)} into {elem}")
            if k in self.nan_keys:
                nan_flags = self.accs[("nan", k)]
                while len(nan_flags) > 1:
                    nan_flags = [
                        e.value(f"arith.ori {nan_flags[i]}, {nan_flags[i + 1]} : vector<{lanes}xi1>")
                        if i + 1 < len(nan_flags)
                        else nan_flags[i]
                        for i in range(0, len(nan_flags), 2)
                    ]
                any_nan = e.value(f"vector.reduction <or>, {nan_flags[0]} : vector<{lanes}xi1> into i1")
                nan = e.value(f"arith.constant {'0x7FC00000' if str(elem) == 'f32' else '0x7FF8000000000000'} : {elem}")
                totals[k] = e.value(f"arith.select {any_nan}, {nan}, {totals[k]} : {elem}")
        return totals

    def emit(self) -> None:
        """Invariants, broadcasts, the vector loop, leftover whole vectors, horizontal reductions, the scalar tail."""
        gen, op = self.gen, self.op
        self.scalars = self._invariants()
        lanes, unroll = op.lanes, gen.o.unroll
        total = op.ranges[self.lane]
        step = lanes * unroll
        main = total - total % step
        vectors_left = (total - main) // lanes
        tail_start = main + vectors_left * lanes
        self._broadcasts()
        self._accumulators()
        if main:
            self._main_loop(main, step)
        for v in range(vectors_left):
            result = self.accumulate(main + v * lanes, {s: self.accs[s][v % unroll] for s in self.slots})
            for s in self.slots:
                self.accs[s][v % unroll] = result[s]
        totals = self._horizontal()
        for j in range(tail_start, total):
            totals.update(self.body_at(j, None, totals))
        for k in self.keys:
            red = op.reductions[k]
            old = gen.load(op.outputs[k], self.point, None)
            gen.store(gen.combine(red, old, totals[k], None), op.outputs[k], self.point, None)
