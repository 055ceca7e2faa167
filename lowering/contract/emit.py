"""The driver of `slicer-kernel-contract`: one generated packed GEMM per contraction, and the pass over a module.

The loop nest of one contraction (static shapes, one function each) around the shared micro-kernel is
drawn in the package docstring (`slicer.lowering.contract`).

Edge tiles (M or N not a multiple of the tile) run on a zeroed scratch tile copied in and out. A large
C written once (zero at the start, one K block) gets non-temporal stores.
"""

from __future__ import annotations

import logging

from mlir import ir
from mlir.dialects import linalg

from slicer.core.names import USES_AMX_ATTR
from slicer.core.operations import walk_ops

from ..emitter import GeneratedFunctions, Index, call_instead, module_avx512
from .analysis import Contraction, NotAContraction, analyze, bf16_operands, reads_bf16
from .bf16_gemm import bf16_gemm_text
from .bf16_ukernels import bf16_mr, bf16_ukernel_text
from .blocking import ContractOptions
from .epilogue import rounding_epilogue
from .matrix_units import AMX, chosen_units, module_units
from .packing import Packer
from .ukernel import ukernel_text
from .zero_init import zero_before

log = logging.getLogger("slicer.kernels")


class Gemm(Packer):
    """The generated function of one contraction: buffers, the block loops, the micro-kernel calls per tile."""

    # -- the function ------------------------------------------------------------------------------
    def generate(self) -> str:
        c, e = self.c, self.e
        mr, nr, t = self.mr, self.nr, self.t
        a_size = self.mb.max_units * self.kb.max_units * mr
        b_size = self.nb.max_units * self.kb.max_units * nr
        ap0 = e.value(f"memref.alloc() {{alignment = 64 : i64}} : memref<{a_size}x{t}>")
        bp0 = e.value(f"memref.alloc() {{alignment = 64 : i64}} : memref<{b_size}x{t}>")
        ap = e.value(f"memref.cast {ap0} : memref<{a_size}x{t}> to memref<?x{t}>")
        bp = e.value(f"memref.cast {bp0} : memref<{b_size}x{t}> to memref<?x{t}>")
        tile_type = f"memref<{mr}x{nr}x{t}, strided<[?, 1], offset: ?>>"
        scratch = e.value(f"memref.alloca() {{alignment = 64 : i64}} : memref<{mr}x{nr}x{t}>")
        scratch_dyn = e.value(f"memref.cast {scratch} : memref<{mr}x{nr}x{t}> to {tile_type}")
        vzero = e.value(f"arith.constant dense<0.0> : {self.vt}")
        self.false = e.value("arith.constant false", "b")
        self.nt_flag = self.nontemporal_flag()

        def on_k_block(nblock, kblock, fixed):
            kc = e.mul(kblock.length, self.kb.inner)
            self.pack(c.b, self.nb, nblock, kblock, bp, nr, fixed)
            return kc

        def on_tile(where, kblock, kc, boff, tlin, height, width):
            aoff = e.mul(tlin, e.mul(kc, mr))
            zero = kblock.first if c.zero_init else False
            self.tile(where, aoff, boff, kc, height, width, ap, bp, scratch, scratch_dyn, vzero, tile_type, zero)

        self.nest(on_k_block, lambda mblock, kblock, kc, fixed: self.pack(c.a, self.mb, mblock, kblock, ap, mr, fixed),
                  lambda plin, kc: e.mul(plin, e.mul(kc, nr)), on_tile)
        return self.function_text()

    def tile(self, where, aoff, boff, kc, height, width, ap, bp, scratch, scratch_dyn, vzero, tile_type, zero) -> None:
        """One register tile of C at `where` (loop dim -> element index; M0/N0 are the tile's corner).

        `zero` (static or i1): C is known to be zero here (first K block after a zero fill), so the
        micro-kernel starts from zero accumulators instead of loading the tile.
        """
        c, e = self.c, self.e
        flag = e.value(f"arith.constant {'true' if zero is True else 'false'}", "b") if isinstance(zero, bool) else zero
        mr, nr, t = self.mr, self.nr, self.t
        m0, n0 = c.m[-1], c.n[-1]
        out = c.output
        call_args = f"{ap}, {e.idx(aoff)}, {bp}, {e.idx(boff)}"
        call_types = f"memref<?x{t}>, index, memref<?x{t}>, index, {tile_type}, index, i1, i1"

        def direct():
            offsets = e.indices(where[d] for d in out.dims)
            sizes = ", ".join(str(mr) if d == m0 else str(nr) if d == n0 else "1" for d in out.dims)
            ones = ", ".join("1" for _ in out.dims)
            m_stride = out.stride_of(m0)
            sub_type = f"memref<{mr}x{nr}x{t}, strided<[{m_stride}, 1], offset: ?>>"
            assert out.dims.index(m0) < out.dims.index(n0), "direct tiles need M0 before N0 in C"
            view = e.value(f"memref.subview %out[{offsets}] [{sizes}] [{ones}] : {out.type_text} to {sub_type}")
            dyn = e.value(f"memref.cast {view} : {sub_type} to {tile_type}")
            e.line(f"func.call @{self.ukernel}({call_args}, {dyn}, {e.idx(kc)}, {flag}, {self.nt_flag}) : "
                   f"({call_types}) -> ()")

        def via_scratch(h: Index, w: Index):
            for i in range(mr):
                for v in range(self.o.nv):
                    e.line(f"vector.store {vzero}, {scratch}[{e.idx(i)}, {e.idx(v * self.lanes)}] : "
                           f"memref<{mr}x{nr}x{t}>, {self.vt}")
            def out_coords(i, j):  # the output element at row i, column j of the tile
                point = {**where, m0: e.add(where[m0], i), n0: e.add(where[n0], j)}
                return e.indices(point[d] for d in out.dims)

            def copy_in():
                with e.loop(0, h) as i:
                    with e.loop(0, w) as j:
                        x = e.value(f"memref.load %out[{out_coords(i, j)}] : {out.type_text}")
                        e.line(f"memref.store {x}, {scratch}[{e.idx(i)}, {e.idx(j)}] : memref<{mr}x{nr}x{t}>")

            if zero is False:
                copy_in()
            elif zero is not True:
                not_zero = e.value(f"arith.xori {zero}, {e.value('arith.constant true', 'b')} : i1", "b")
                with e.if_(not_zero):
                    copy_in()
            e.line(f"func.call @{self.ukernel}({call_args}, {scratch_dyn}, {e.idx(kc)}, {flag}, {self.false}) : "
                   f"({call_types}) -> ()")
            with e.loop(0, h) as i:
                with e.loop(0, w) as j:
                    x = e.value(f"memref.load {scratch}[{e.idx(i)}, {e.idx(j)}] : memref<{mr}x{nr}x{t}>")
                    e.line(f"memref.store {x}, %out[{out_coords(i, j)}] : {out.type_text}")

        if not c.direct_c:
            via_scratch(height, width)
            return
        full_h = height == mr if isinstance(height, int) else e.cmp("eq", height, mr)
        full_w = width == nr if isinstance(width, int) else e.cmp("eq", width, nr)
        if full_h is False or full_w is False:
            via_scratch(height, width)
            return
        if full_h is True and full_w is True:
            direct()
            return
        known_at_run_time = [f for f in (full_h, full_w) if isinstance(f, str)]  # one or both (else returned)
        cond = known_at_run_time[0] if len(known_at_run_time) == 1 else \
            e.value(f"arith.andi {full_h}, {full_w} : i1")
        then, otherwise = e.if_else(cond)
        with then:
            direct()
        with otherwise:
            via_scratch(height, width)


def contraction_text(c: Contraction, options: ContractOptions, name: str, ukernel: str, avx512: bool = False) -> str:
    gen = Gemm(c, options, name, ukernel)
    gen.e.avx512 = avx512
    return gen.generate()


def contract_module(module: ir.Module, options: ContractOptions = ContractOptions()) -> list[str]:
    """Replace every contraction generic of `module` by a call to a generated packed GEMM.

    Returns one line per replaced op (its classification); ops the analysis rejects stay. Contractions of
    bf16 operands get the bf16 GEMM (`bf16_gemm.py`) on the units `options.bf16_units` chooses; the module
    then records whether it holds AMX code (`USES_AMX_ATTR`: its loader must ask for the tile state).
    """
    context = module.context
    avx512 = module_avx512(module)
    replaced: list[str] = []
    ukernels: dict[str, str] = {}
    functions = GeneratedFunctions("__slicer_contract_")
    calls: list[tuple[ir.Operation, Contraction, str]] = []
    roundings: list[ir.Operation] = []
    units = None
    for op in walk_ops(module, linalg.GenericOp.OPERATION_NAME):
        try:
            c = analyze(op)
            operands = bf16_operands(c) if reads_bf16(c) else None
            if reads_bf16(c) and operands is None and c.element == "bf16":  # the f32 GEMM stores f32 or f64 only
                raise NotAContraction("a bf16 C whose sides are not bf16 inputs as they are")
        except NotAContraction as why:
            log.debug("not a contraction (%s): %s", why, op.location)
            continue
        zero, fill = zero_before(op, c.output.value)
        if zero:
            c.zero_init = True
            if fill is not None:
                fill.erase()
        if operands is not None:
            fused = rounding_epilogue(c)
            if fused is not None:  # the GEMM stores bf16 (bias added first) where the rounding did (epilogue.py)
                rounding, c = fused
                roundings.append(rounding)
            units = units or chosen_units(options.bf16_units, module_units(module))
            text = bf16_gemm_text(c, options, GeneratedFunctions.SELF, _bf16_ukernels(ukernels, units, options),
                                  units, *operands)
        else:
            uk = f"__slicer_ukernel_{c.element}_{options.mr}x{options.nv}_u{options.unroll}"
            if uk not in ukernels:
                ukernels[uk] = ukernel_text(uk, c.element, options.mr, options.nv, options.unroll)
            text = contraction_text(c, options, GeneratedFunctions.SELF, uk, avx512)
        calls.append((op, c, functions.name_of(text)))
    if not calls:
        return replaced
    functions.add_to(module, *ukernels.values())
    if units == AMX:
        module.operation.attributes[USES_AMX_ATTR] = ir.UnitAttr.get(context)
    for op, c, name in calls:
        addends = [a.value for a in c.addends]
        call_instead(op, name, [o.value for o in c.inputs] + [c.output.value] + addends + list(c.captured))
        replaced.append(f"@{name}: {c.describe()}")
    for rounding in roundings:
        rounding.erase()
    return replaced


def _bf16_ukernels(ukernels: dict[str, str], units: str, options: ContractOptions):
    """`name(kcp)`: the bf16 micro-kernel for K blocks of padded depth `kcp`, added to `ukernels` when new
    (AMX: one per static depth, all its steps unrolled; the vector kernels: one for every depth)."""
    rows = bf16_mr(units, options.mr)

    def name(kcp) -> str:
        steps = kcp // 32 if units == AMX and isinstance(kcp, int) else None
        uk = f"__slicer_ukernel_bf16_{units}_{rows}x32_u{options.unroll}" + (f"_k{kcp}" if steps else "")
        if uk not in ukernels:
            ukernels[uk] = bf16_ukernel_text(uk, units, options.unroll, rows, steps)
        return uk

    return name
