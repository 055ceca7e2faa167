"""The driver of `slicer-kernel-rows`: one generated loop nest per fused row group, and the pass over a module.

A group's function loops over its shared row dims and, inside, emits each op at the fixed rows
(`PointEmitter`); with non-temporal stores planned, the nest is emitted twice, under a run-time check
that the buffers are 64-byte aligned.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import func as func_d

from ..emitter import GeneratedFunctions, Index, module_avx512
from ..memref_facts import VECTOR_BYTES, byte_width
from .analysis import RowOp
from .buffers import RowsOptions
from .cascade import CascadeEmitter, plan_cascade
from .grouping import find_groups


class RowsGen(CascadeEmitter):
    """The generated function of one row group."""

    def generate(self) -> str:
        e = self.e
        first = self.ops[0]
        row_dims = first.row_prefix[: self.rows]
        extents = [first.ranges[d] for d in row_dims]
        for value, (first_write, last, _, type_) in list(self.scratch.items()):
            name = e.value(f"memref.alloca() {{alignment = 64 : i64}} : {type_}", "s")
            self.scratch[value] = (first_write, last, name, type_)
        self.cascades = {}
        for index, op in enumerate(self.ops):
            cascade = plan_cascade(op, set(op.row_prefix[: self.rows]))
            if cascade is not None:
                self.allocate_cascade(op, cascade)
                self.cascades[index] = cascade

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
                pointer = e.value(
                    f"memref.extract_aligned_pointer_as_index {self.names[value]} : {value.type} -> index"
                )
                _, offset = ir.MemRefType(value.type).get_strides_and_offset()
                if ir.MemRefType(value.type).is_dynamic_stride_or_offset(offset):
                    aligned = "false"
                    break
                byte = e.add(pointer, offset * byte_width(ir.MemRefType(value.type).element_type))
                low = e.value(f"arith.remui {e.idx(byte)}, {e.idx(VECTOR_BYTES)} : index")
                ok = e.value(f"arith.cmpi eq, {low}, {e.idx(0)} : index")
                aligned = ok if aligned is None else e.value(f"arith.andi {aligned}, {ok} : i1")
            if aligned is None or aligned == "false":  # (None: no buffer, which `if self.nt` excludes)
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
        # Parallel dims outside reduction dims (any order is correct: reductions go through memory), which
        # run as a cascade of short sums where the op has one (cascade.py).
        cascade = self.cascades.get(self.op_index)
        outer.sort(key=lambda d: (d not in op.parallel, d))
        if cascade is not None:
            outer = [d for d in outer if d in op.parallel]

        def nest(level: int, point: dict) -> None:
            if level == len(outer):
                if cascade is not None:
                    self.emit_cascade(op, cascade, point)
                else:
                    self.emit_point(op, point, lane)
                return
            with e.loop(0, op.ranges[outer[level]]) as v:
                nest(level + 1, {**point, outer[level]: v})

        nest(0, dict(fixed))


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
    avx512 = module_avx512(module)
    groups = []
    for block in _blocks(module.operation):
        groups += find_groups(block)
    if not groups:
        return []
    functions = GeneratedFunctions("__slicer_rows_")
    calls = []
    for ops, rows in groups:
        gen = RowsGen(ops, rows, options, GeneratedFunctions.SELF)
        gen.e.avx512 = avx512
        calls.append((gen, functions.name_of(gen.generate())))
    functions.add_to(module)
    report = []
    for (ops, rows), (gen, name) in zip(groups, calls):
        last = ops[-1].op
        with ir.InsertionPoint(last), last.location:
            func_d.CallOp([], ir.FlatSymbolRefAttr.get(name), list(gen.params))
        for op in ops:
            op.op.erase()
        report.append(f"@{name}: {len(ops)} op(s), {rows} row dim(s)")
    return report
