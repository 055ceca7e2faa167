"""The packed GEMM of a contraction of bf16 operands, accumulated in f32 (C in f32, or bf16 rounded at the store).

The loop nest is the f32 GEMM's (`emit.py`, drawn in the package docstring) with bf16 panels
(`bf16_packing.py`) and one of three micro-kernels (`bf16_ukernels.py`: AMX tiles, AVX512-BF16 dot
products, or f32 FMAs; `matrix_units.py` chooses). Cache blocks: a B panel of 32 columns x `kc` k in L1
(32 KiB at kc = 512), an M block of `mc` rows x `kc` in L2, an N block of `nc` columns.

C tiles: an f32 C contiguous along N is handed to the micro-kernel as a view (AMX loads its tiles straight
from it); a bf16 C, a C whose innermost dim is not N, and edge tiles go through an f32 scratch tile,
converted with vectors where the tile is whole. A large f32 C written once (zero at the start, one K block)
gets non-temporal stores from the vector kernels (`Loops.nontemporal_flag`: attention's 64 MiB scores). A
bf16 C is rounded when a tile is stored after a K block: with K in several blocks (K > kc) the partial sums
are rounded between blocks (oneDNN keeps the whole K in f32); where that matters, make C f32 and round it
after the contraction, as torch-mlir's import of a bf16 matmul does.
"""

from __future__ import annotations

from math import prod

from mlir.dialects import memref, vector

from ..emitter import Emitter, Index
from .analysis import Contraction, k_mask
from .bf16_packing import Bf16Packer
from .bf16_ukernels import LANES, NR, bf16_mr, k_padding
from .blocking import ContractOptions, blocking
from .matrix_units import AMX

A_IN_PLACE_COLUMNS = 512
"""At most this many columns (N), A is read in place rather than packed (`Bf16Gemm.a_in_place`): faster on
AVX512-BF16 up to here (attention's `p @ v`, 64 columns a head, gains most), equal within noise from 1024 columns
on (a packed block then serves the whole N block of `nc` columns). AMX reads A in place at any N
(`Bf16Gemm.a_in_place`)."""
BF16_BLOCKS = {"mc": 256, "nc": 1024, "kc": 512}
"""Cache blocks of the bf16 GEMMs (rows, columns, depth): the f32 ones' (`ContractOptions`) hold 4-byte
elements and 8-row tiles; bf16 panels take half the bytes, and AMX tiles are 32 rows."""


class Bf16Gemm(Bf16Packer):
    """The generated function of one bf16 contraction."""

    def __init__(self, c: Contraction, options: ContractOptions, name: str, ukernel, units: str,
                 a_input: int, b_input: int):
        self.c, self.o, self.name, self.ukernel = c, options, name, ukernel
        self.units, self.a_input, self.b_input = units, a_input, b_input
        self.e = Emitter()
        self.t = c.element
        self.lanes = LANES
        self.mr, self.nr = bf16_mr(units, options.mr), NR
        self.pad = k_padding(units)
        r = c.ranges
        self.mb = blocking(c.m, [r[d] for d in c.m], self.mr, max(1, BF16_BLOCKS["mc"] // self.mr))
        self.nb = blocking(c.n, [r[d] for d in c.n], self.nr, max(1, BF16_BLOCKS["nc"] // self.nr))
        self.kb = blocking(c.k, [r[d] for d in c.k], 1, BF16_BLOCKS["kc"])
        self.args = [f"%in{i}" for i in range(len(c.inputs))]
        self.cap = [f"%cap{i}" for i in range(len(c.captured))]
        self.masks = (k_mask(c, c.a), k_mask(c, c.b))  # a side masked along K: its k's from the bound on are 0
        self.in_place = self.a_in_place()
        self.a_flat: str | None = None  # A as a flat memref, when it is read in place (set by `generate`)

    def a_in_place(self) -> bool:
        """Whether whole A tiles are read from A itself, not packed: when N is at most `A_IN_PLACE_COLUMNS` (a
        packed A block would serve so few panels that packing costs a good part of the products: attention's
        `p @ v`, 64 columns a head), or always on AMX (its products are several times faster than AVX-512's, so
        packing would weigh that much more; tile loads take any row stride, as oneDNN's brgemm reads A in place:
        reasoned,
        not measured here, no AMX on this machine), and A is laid out as the panel is (contiguous along the
        one K dim, every K block a whole number of k pairs or AMX steps). Edge tiles (fewer rows) are packed."""
        c = self.c
        a = c.inputs[self.a_input]
        narrow = prod(c.ranges[d] for d in c.n) <= A_IN_PLACE_COLUMNS
        if len(c.k) != 1 or a.stride_of(c.k[0]) != 1 or not (narrow or self.units == AMX) or self.masks[0] is not None:
            return False
        if c.ranges[c.k[0]] % self.pad or self.kb.chunk % self.pad:
            return False
        _, offset = a.type.get_strides_and_offset()
        return not a.type.is_dynamic_stride_or_offset(offset)

    def _a_flat(self) -> str:
        """A as a 1-d memref of its elements from its base (the micro-kernel's `%ap` when it reads A in place)."""
        a = self.c.inputs[self.a_input]
        _, offset = a.type.get_strides_and_offset()
        extent = offset + sum((size - 1) * stride for size, stride in zip(a.type.shape, a.strides)) + 1
        return self.e.value(f"memref.reinterpret_cast {self.args[self.a_input]} to offset: [0], sizes: [{extent}], "
                            f"strides: [1] : {a.type_text} to memref<?xbf16>")

    def a_operand(self, where: dict, kstart: Index, tlin: Index, kcp: Index, height: Index, ap: str) -> tuple:
        """(buffer, offset, row stride) of the tile's A: the packed tile, or A itself for a whole tile in place."""
        e = self.e
        packed = (ap, e.mul(tlin, e.mul(kcp, self.mr)), kcp)
        whole = e.cmp("eq", height, self.mr)
        a = self.c.inputs[self.a_input]
        lda = a.stride_of(self.c.m[-1])
        if self.a_flat is None or whole is False or lda is None:  # A not read in place (`a_in_place`), an edge tile
            return packed
        _, offset = a.type.get_strides_and_offset()
        point = {**where, self.c.k[0]: kstart}
        direct = (self.a_flat, e.affine([(point[d], s) for d, s in zip(a.dims, a.strides)], offset), lda)
        if whole is True:
            return direct
        types = ("memref<?xbf16>", "index", "index")
        return tuple(e.value(f"arith.select {whole}, {e.idx(x)}, {e.idx(y)} : {t}") for x, y,
                     t in zip(direct, packed, types))

    def generate(self) -> str:
        c, e = self.c, self.e
        kcp_max = -(-self.kb.max_units // self.pad) * self.pad
        self.a_flat = self._a_flat() if self.in_place else None
        self.false = e.value("arith.constant false", "b")
        self.nt_flag = self.nontemporal_flag() if c.element == "f32" and self.units != AMX else self.false
        ap = self._buffer(self.mb.max_units * self.mr * kcp_max)
        bp = self._buffer(self.nb.max_units * self.nr * kcp_max)
        scratch = e.value(f"memref.alloca() {{alignment = 64 : i64}} : memref<{self.mr}x{NR}xf32>")

        def on_k_block(nblock, kblock, fixed):
            kc = e.mul(kblock.length, self.kb.inner)
            kcp = self.round_up(kc, self.pad)
            self.pack_bf16(False, self.nb, nblock, kblock, bp, kc, kcp, fixed)
            self._zero_past_bound(False, bp, kblock.start, kc, kcp)
            return kc, kcp

        def on_m_block(mblock, kblock, depth, fixed):
            kc, kcp = depth
            self.pack_bf16(True, self.mb, mblock, kblock, ap, kc, kcp, fixed, only_partial=self.in_place)
            self._zero_past_bound(True, ap, kblock.start, kc, kcp)

        def on_tile(where, kblock, depth, boff, tlin, height, width):
            kcp = depth[1]
            a = self.a_operand(where, kblock.start, tlin, kcp, height, ap)
            zero = kblock.first if c.zero_init else False
            self.tile(where, a, boff, kcp, height, width, bp, scratch, zero)

        self.nest(on_k_block, on_m_block, lambda plin, depth: e.mul(plin, e.mul(depth[1], NR)), on_tile)
        return self.function_text()

    def _zero_past_bound(self, is_a: bool, buffer: str, kstart: Index, kc: Index, kcp: Index) -> None:
        """Zero the packed k's of a masked side (`k_mask`) from its bound on, in every unit of the buffer: the
        block's k's [max(bound - kstart, 0), kc) (empty but in the block holding the bound)."""
        capture = self.masks[0 if is_a else 1]
        if capture is None:
            return
        e = self.e
        group, unit = (self.mb, self.mr) if is_a else (self.nb, self.nr)
        first = e.value(f"arith.subi {self.cap[capture]}, {e.idx(kstart)} : index")
        first = e.value(f"arith.minsi {e.value(f'arith.maxsi {first}, {e.idx(0)} : index')}, {e.idx(kc)} : index")
        zero = e.value("arith.constant 0.0 : bf16")
        with e.loop(0, group.max_units * unit) as row:
            base = e.mul(e.value(f"arith.divui {row}, {e.idx(unit)} : index"), e.mul(unit, kcp))
            lane = e.value(f"arith.remui {row}, {e.idx(unit)} : index")
            with e.loop(first, kc) as k:
                offset = self._offset(is_a, base, lane, k, kcp)
                e.line(f"memref.store {zero}, {buffer}[{e.idx(offset)}] : memref<?xbf16>")

    def _buffer(self, size: int) -> str:
        e = self.e
        buffer = e.value(f"memref.alloc() {{alignment = 64 : i64}} : memref<{size}xbf16>")
        return e.value(f"memref.cast {buffer} : memref<{size}xbf16> to memref<?xbf16>")

    @property
    def tile_type(self) -> str:
        return f"memref<{self.mr}x{NR}xf32, strided<[?, 1], offset: ?>>"

    def _call(self, a: tuple, bp, boff, c_tile: str, kcp, zero: bool | str, nt: str) -> None:
        """The micro-kernel on one tile. AMX with a run-time depth (K blocks of uneven length) calls the kernel
        of the full block's static depth when the block is full, so only the last block pays C's round trips."""
        e = self.e
        flag = e.value(f"arith.constant {'true' if zero is True else 'false'}", "b") if isinstance(zero, bool) else zero
        types = f"memref<?xbf16>, index, index, memref<?xbf16>, index, {self.tile_type}, index, i1, i1"
        ap, aoff, lda = a

        def call(depth):
            e.line(f"func.call @{self.ukernel(depth)}({ap}, {e.idx(aoff)}, {e.idx(lda)}, {bp}, "
                   f"{e.idx(boff)}, {c_tile}, "
                   f"{e.idx(depth)}, {flag}, {nt}) : ({types}) -> ()")

        full = self.round_up(self.kb.max_units, self.pad)
        if self.units != AMX or not isinstance(kcp, str):
            call(kcp)
            return
        then, otherwise = e.if_else(e.value(f"arith.cmpi eq, {kcp}, {e.idx(full)} : index", "b"))
        with then:
            call(full)
        with otherwise:
            call(kcp)

    def tile(self, where, a, boff, kcp, height, width, bp, scratch, zero) -> None:
        """One C tile at `where` (loop dim -> element index; M0/N0 are its corner): a view of C when it is f32,
        contiguous along N and whole, else the scratch tile."""
        c, e = self.c, self.e
        full_h, full_w = e.cmp("eq", height, self.mr), e.cmp("eq", width, NR)
        direct = c.direct_c and c.element == "f32" and not c.epilogue
        whole = _both(e, full_h, full_w)

        def view():
            out = c.output
            m0, n0 = c.m[-1], c.n[-1]
            offsets = e.indices(where[d] for d in out.dims)
            sizes = ", ".join(str(self.mr) if d == m0 else str(NR) if d == n0 else "1" for d in out.dims)
            ones = ", ".join("1" for _ in out.dims)
            sub_type = f"memref<{self.mr}x{NR}xf32, strided<[{out.stride_of(m0)}, 1], offset: ?>>"
            sub = e.value(f"memref.subview %out[{offsets}] [{sizes}] [{ones}] : {out.type_text} to {sub_type}")
            self._call(a, bp, boff, e.value(f"memref.cast {sub} : {sub_type} to {self.tile_type}"), kcp, zero,
                       self.nt_flag)

        def via_scratch(vectors: bool):
            self._scratch_tile(where, height, width, scratch, zero, vectors,
                               lambda dyn: self._call(a, bp, boff, dyn, kcp, zero, self.false))

        if whole is False or not c.direct_c:
            via_scratch(False)
        elif whole is True:
            view() if direct else via_scratch(True)
        else:
            then, otherwise = e.if_else(whole)
            with then:
                view() if direct else via_scratch(True)
            with otherwise:
                via_scratch(False)

    def _scratch_tile(self, where, height, width, scratch, zero, vectors: bool, call) -> None:
        """C's tile copied into the f32 scratch (unless it starts at zero), the micro-kernel, and back (rounded
        to bf16 for a bf16 C): whole tiles of a C contiguous along N with vectors, others element by element."""
        c, e = self.c, self.e
        out = c.output
        m0, n0 = c.m[-1], c.n[-1]
        s_type = f"memref<{self.mr}x{NR}xf32>"
        t = c.element
        step = LANES if vectors else 1
        vt_f, vt_c = (f"vector<{LANES}xf32>", f"vector<{LANES}x{t}>") if vectors else ("f32", t)
        load_op, store_op = ((vector.LoadOp.OPERATION_NAME, vector.StoreOp.OPERATION_NAME) if vectors
                             else (memref.LoadOp.OPERATION_NAME, memref.StoreOp.OPERATION_NAME))
        suffix_f, suffix_c = (f", {vt_f}", f", {vt_c}") if vectors else ("", "")
        h, w = (self.mr, NR) if vectors else (height, width)

        def coords(i, j):
            point = {**where, m0: e.add(where[m0], i), n0: e.add(where[n0], j)}
            return e.indices(point[d] for d in out.dims)

        def copy_in():
            with e.loop(0, h) as i:
                with e.loop(0, w, step) as j:
                    x = e.value(f"{load_op} %out[{coords(i, j)}] : {out.type_text}{suffix_c}")
                    if t != "f32":
                        x = e.value(f"arith.extf {x} : {vt_c} to {vt_f}")
                    e.line(f"{store_op} {x}, {scratch}[{e.idx(i)}, {e.idx(j)}] : {s_type}{suffix_f}")

        if not vectors and (height != self.mr or width != NR):
            self._clear(scratch)  # rows and columns past C's edge must not hold garbage (NaN, inf)
        if zero is False:
            copy_in()
        elif zero is not True:
            with e.if_(e.value(f"arith.xori {zero}, {e.value('arith.constant true', 'b')} : i1", "b")):
                copy_in()
        call(e.value(f"memref.cast {scratch} : {s_type} to {self.tile_type}"))
        with e.loop(0, h) as i:
            with e.loop(0, w, step) as j:
                x = e.value(f"{load_op} {scratch}[{e.idx(i)}, {e.idx(j)}] : {s_type}{suffix_f}")
                x = self._epilogue(x, where, i, j, vectors)
                if t != "f32":
                    x = e.value(f"arith.truncf {x} : {vt_f} to {vt_c}")
                e.line(f"{store_op} {x}, %out[{coords(i, j)}] : {out.type_text}{suffix_c}")

    def _epilogue(self, x: str, where, i, j, vectors: bool) -> str:
        """`x`, the whole f32 sum at row i, column j of the tile at `where` (a vector along N0, or one element),
        through the contraction's epilogue steps (`Contraction.epilogue`): the same f32 ops the epilogue op did."""
        added = 0
        vt_f, vt_b = (f"vector<{LANES}xf32>", f"vector<{LANES}xbf16>") if vectors else ("f32", "bf16")
        for step in self.c.epilogue:
            if step == "add":
                a = self._addend(added, where, i, j, vectors)
                x = self.e.value(f"arith.addf {x}, {a} : {vt_f}")
                added += 1
            else:
                narrow = self.e.value(f"arith.truncf {x} : {vt_f} to {vt_b}")
                x = self.e.value(f"arith.extf {narrow} : {vt_b} to {vt_f}")
        return x

    def _addend(self, index: int, where, i, j, vectors: bool) -> str:
        """Addend `index` (`Contraction.addends`, widened to f32) at row i, column j of the tile at `where`: a vector
        along N0 (read as one where the addend is contiguous along it, one value broadcast where it does not
        depend on it) or one element."""
        c, e = self.c, self.e
        a, name = c.addends[index], f"%addend{index}"
        m0, n0 = c.m[-1], c.n[-1]
        point = {**where, m0: e.add(where[m0], i), n0: e.add(where[n0], j)}
        at = e.indices(point[d] for d in a.dims)
        t = str(a.type.element_type)
        if vectors and n0 in a.dims:  # contiguous along N0 (epilogue.py checks)
            x = e.value(f"vector.load {name}[{at}] : {a.type_text}, vector<{LANES}x{t}>")
            return x if t == "f32" else e.value(f"arith.extf {x} : vector<{LANES}x{t}> to vector<{LANES}xf32>")
        x = e.value(f"memref.load {name}[{at}] : {a.type_text}")
        x = x if t == "f32" else e.value(f"arith.extf {x} : {t} to f32")
        return e.value(f"vector.broadcast {x} : f32 to vector<{LANES}xf32>") if vectors else x

    def _clear(self, scratch: str) -> None:
        e = self.e
        zeros = e.value(f"arith.constant dense<0.0> : vector<{LANES}xf32>")
        for i in range(self.mr):
            for j in range(0, NR, LANES):
                e.line(f"vector.store {zeros}, {scratch}[{e.idx(i)}, {e.idx(j)}] : memref<{self.mr}x{NR}xf32>, "
                       f"vector<{LANES}xf32>")


def _both(e: Emitter, a: bool | str, b: bool | str) -> bool | str:
    if a is False or b is False:
        return False
    if a is True:
        return b
    if b is True:
        return a
    return e.value(f"arith.andi {a}, {b} : i1", "b")


def bf16_gemm_text(c: Contraction, options: ContractOptions, name: str, ukernel, units: str,
                   a_input: int, b_input: int) -> str:
    """The generated function (named `name`) of contraction `c` on `units`, calling the micro-kernel
    `ukernel(kcp)` names for a K block of padded depth `kcp` (static int or SSA)."""
    return Bf16Gemm(c, options, name, ukernel, units, a_input, b_input).generate()

