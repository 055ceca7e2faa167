"""The micro-kernels of bf16 contractions: C[MR x 32] (f32) += Ap[tile] * Bp[panel] over a block's k.

All three read the same packed panels (`bf16_packing.py`): `Ap[tile]` holds MR rows of `kcp` bf16 (k
contiguous, `kcp` the block's k padded with zeros; rows `%lda` apart: `kcp` in the panel, or A's own row
stride where the driver reads A in place, `bf16_gemm.Bf16Gemm.a_in_place`), `Bp[panel]` holds `kcp / 2` rows of 32
columns x 2: the pair (k, k+1) of each column side by side (the VNNI layout of AMX's B tile and of `vdpbf16ps`). C is an
f32 tile (a view of the output, or a scratch tile the driver converts); `%zero` starts it from zeros.

- `amx` (MR = 32): 2 x 2 C tiles of 16 x 16 f32 in tile registers, 2 A tiles (16 rows x 32 k) and 2 B tiles
  (16 k pairs x 16 columns x 2): the 8 tile registers, as oneDNN blocks them; each 32-deep k step is four
  `tdpbf16ps`. LLVM cannot carry a tile value across a loop's back edge (an `x86_amx` phi fails instruction
  selection), so C stays in tiles only within one basic block: a static depth (every K block but a
  remainder of run-time length) gets a kernel of its own with all its steps unrolled (C loaded once and
  stored once; at most 16 steps: kc <= 512); a run-time depth loads and stores C around each group of
  `unroll` steps, then groups of 4, 2, 1 steps for the rest.
- `avx512bf16` (MR = the `mr` option, 8 by default): the tile in MR x 2 zmm accumulators; per k pair, two vectors of B
  (16 columns x 2) and MR broadcast pairs of A, each `x86vector.avx512.dot` (`vdpbf16ps`) adding both products of a
  pair.
- `f32` (MR as `avx512bf16`): the same loop where the pairs are widened to f32 (bf16 is the top half of an f32: a shift
  and a mask) and multiplied by FMAs: any CPU with vector FMAs.
"""

from __future__ import annotations

from ..emitter import Emitter
from .matrix_units import AMX, AVX512BF16

NR = 32
"""Columns of a C tile (two AMX tiles, two f32 vectors) and of a packed B panel."""
LANES = 16
VT = f"vector<{LANES}xf32>"


def bf16_mr(units: str, rows: int = 8) -> int:
    """Rows of the C tile of `units`: AMX's 2 x 16; the vector kernels' `rows` (the `mr` option), rounded up to
    a multiple of 4 (a tile of A then holds a multiple of 8 bf16: whole 16-byte zero stores)."""
    return 32 if units == AMX else -(-rows // 4) * 4


def k_padding(units: str) -> int:
    """What a block's k is padded to in the panels: an AMX tile's 32, else a pair."""
    return 32 if units == AMX else 2


def _head(name: str, mr: int) -> str:
    tile = f"memref<{mr}x{NR}xf32, strided<[?, 1], offset: ?>>"
    return (f"func.func private @{name}(%ap: memref<?xbf16>, %aoff: index, %lda: index, %bp: memref<?xbf16>, "
            "%boff: index, "
            f"%c: {tile}, %kcp: index, %zero: i1, %nt: i1) {{")


def bf16_ukernel_text(name: str, units: str, unroll: int, rows: int = 8, steps: int | None = None) -> str:
    """The micro-kernel of `units` (`matrix_units.BF16_UNITS`, `rows` as `bf16_mr`) as a function named `name`;
    for AMX, `steps` (a static `kcp / 32`) unrolls the whole depth."""
    mr = bf16_mr(units, rows)
    body = _amx_body(mr, unroll, steps) if units == AMX else _vector_body(mr, unroll, units == AVX512BF16)
    return "\n".join([_head(name, mr), body, "  return", "}"])


def _zero_c(e: Emitter, mr: int) -> None:
    tile = f"memref<{mr}x{NR}xf32, strided<[?, 1], offset: ?>>"
    zeros = e.value(f"arith.constant dense<0.0> : {VT}")
    with e.if_("%zero"):
        for i in range(mr):
            for v in range(NR // LANES):
                e.line(f"vector.store {zeros}, %c[{e.idx(i)}, {e.idx(v * LANES)}] : {tile}, {VT}")


def _amx_body(mr: int, unroll: int, steps: int | None) -> str:
    e = Emitter("u")
    tile = f"memref<{mr}x{NR}xf32, strided<[?, 1], offset: ?>>"
    a_type = f"memref<{mr}x?xbf16, strided<[?, 1], offset: ?>>"
    b_type = f"memref<?x{2 * NR}xbf16, strided<[{2 * NR}, 1], offset: ?>>"
    c_tile, ab_tile = "!amx.tile<16x16xf32>", "!amx.tile<16x32xbf16>"
    _zero_c(e, mr)
    pairs = e.value("arith.divui %kcp, " + e.idx(2) + " : index")
    a = e.value(f"memref.reinterpret_cast %ap to offset: [%aoff], sizes: [{mr}, %kcp], strides: [%lda, 1] "
                f": memref<?xbf16> to {a_type}")
    b = e.value(f"memref.reinterpret_cast %bp to offset: [%boff], sizes: [{pairs}, {2 * NR}], strides: [{2 * NR}, 1] "
                f": memref<?xbf16> to {b_type}")
    corners = [(i, j) for i in (0, 16) for j in (0, 16)]

    def group(k, steps: int) -> None:
        cs = {ij: e.value(f"amx.tile_load %c[{e.idx(ij[0])}, {e.idx(ij[1])}] : {tile} into {c_tile}") for ij in corners}
        for u in range(steps):
            ku = e.add(k, 32 * u)
            kp = e.value(f"arith.divui {e.idx(ku)}, {e.idx(2)} : index")
            bs = [e.value(f"amx.tile_load {b}[{kp}, {e.idx(j * 2)}] : {b_type} into {ab_tile}") for j in (0, 16)]
            for i in (0, 16):
                ai = e.value(f"amx.tile_load {a}[{e.idx(i)}, {e.idx(ku)}] : {a_type} into {ab_tile}")
                for jj, j in enumerate((0, 16)):
                    cs[(i, j)] = e.value(f"amx.tile_mulf {ai}, {bs[jj]}, {cs[(i, j)]} : {ab_tile}, {ab_tile}, {c_tile}")
        for (i, j), value in cs.items():
            e.line(f"amx.tile_store %c[{e.idx(i)}, {e.idx(j)}], {value} : {tile}, {c_tile}")

    if steps is not None:  # a static depth: one basic block, C in tiles from the first step to the last
        group(0, steps)
        return e.body()
    step = 32 * unroll
    main = e.value(f"arith.subi %kcp, {e.value(f'arith.remui %kcp, {e.idx(step)} : index')} : index")
    with e.loop(0, main, step) as k:
        group(k, unroll)
    # The rest (fewer than `unroll` steps) in groups of 4, 2, 1 steps: one round trip of C per group.
    left = e.value(f"arith.divui {e.value(f'arith.subi %kcp, {main} : index')}, {e.idx(32)} : index")
    at: str = main
    size = 1 << (unroll - 1).bit_length() - 1 if unroll > 1 else 0
    while size >= 1:
        bit = e.value(f"arith.andi {left}, {e.idx(size)} : index")
        with e.if_(e.value(f"arith.cmpi ne, {bit}, {e.idx(0)} : index")):
            group(at, size)
        at = e.value(f"arith.addi {at}, {e.value(f'arith.muli {bit}, {e.idx(32)} : index')} : index")
        size //= 2
    return e.body()


def _vector_body(mr: int, unroll: int, dot: bool) -> str:
    e = Emitter("u")
    tile = f"memref<{mr}x{NR}xf32, strided<[?, 1], offset: ?>>"
    nv = NR // LANES
    count = mr * nv
    types = ", ".join([VT] * count)
    zeros = e.value(f"arith.constant dense<0.0> : {VT}")
    start = e.fresh("init")
    e.line(f"{start}:{count} = scf.if %zero -> ({types}) {{")
    e.line(f"  scf.yield {', '.join([zeros] * count)} : {types}")
    e.line("} else {")
    loaded = [
        e.value(f"vector.load %c[{e.idx(i)}, {e.idx(v * LANES)}] : {tile}, {VT}") for i in range(mr) for v in range(nv)
    ]
    e.line(f"  scf.yield {', '.join(loaded)} : {types}")
    e.line("}")
    pairs = e.value(f"arith.divui %kcp, {e.idx(2)} : index")
    main = e.value(f"arith.subi {pairs}, {e.value(f'arith.remui {pairs}, {e.idx(unroll)} : index')} : index")
    step = _dot_step(e, mr) if dot else _fma_step(e, mr)
    results: list[str] = []
    with e.loop_carried(0, main, unroll, [f"{start}#{i}" for i in range(count)], VT, results) as (p, carried):
        results[:] = _unrolled(e, step, p, carried, unroll)
    tail: list[str] = []
    with e.loop_carried(main, pairs, 1, results, VT, tail) as (p, carried):
        tail[:] = step(p, carried)
    for nontemporal in (True, False):  # `%nt`: a C written once, not read first (emit.Gemm.nontemporal_flag)
        e.line("scf.if %nt {" if nontemporal else "} else {")
        e.depth += 1
        hint = " {alignment = 64 : i64, nontemporal = true}" if nontemporal else ""
        for i in range(mr):
            for v in range(nv):
                e.line(f"vector.store {tail[i * nv + v]}, %c[{e.idx(i)}, {e.idx(v * LANES)}]{hint} : {tile}, {VT}")
        e.depth -= 1
    e.line("}")
    return e.body()


def _unrolled(e: Emitter, step, p, carried: list[str], copies: int) -> list[str]:
    for u in range(copies):
        carried = step(e.add(p, u), carried)
    return carried


def _pair_of_a(e: Emitter, row: int, p) -> str:
    """The i32 holding A's pair (k = 2p, 2p + 1) of packed row `row`."""
    offset = e.add(e.add("%aoff", e.mul(row, "%lda")), e.mul(p, 2))
    pair = e.value(f"vector.load %ap[{e.idx(offset)}] : memref<?xbf16>, vector<2xbf16>")
    bits = e.value(f"vector.bitcast {pair} : vector<2xbf16> to vector<1xi32>")
    return e.value(f"vector.extract {bits}[0] : i32 from vector<1xi32>")


def _b_vectors(e: Emitter, p) -> list[str]:
    base = e.add("%boff", e.mul(p, 2 * NR))
    return [e.value(f"vector.load %bp[{e.idx(e.add(base, 2 * LANES * v))}] : memref<?xbf16>, vector<32xbf16>")
            for v in range(NR // LANES)]


def _dot_step(e: Emitter, mr: int):
    nv = NR // LANES

    def step(p, acc: list[str]) -> list[str]:
        bs = _b_vectors(e, p)
        new = []
        for i in range(mr):
            wide = e.value(f"vector.broadcast {_pair_of_a(e, i, p)} : i32 to vector<{LANES}xi32>")
            a = e.value(f"vector.bitcast {wide} : vector<{LANES}xi32> to vector<32xbf16>")
            for v in range(nv):
                new.append(e.value(f"x86vector.avx512.dot {acc[i * nv + v]}, {a}, {bs[v]} : vector<32xbf16> -> {VT}"))
        return new

    return step


def _fma_step(e: Emitter, mr: int):
    """bf16 is the upper half of an f32: the even element of a pair is the i32 shifted left by 16, the odd
    one the i32 with its low half cleared."""
    nv = NR // LANES
    it = f"vector<{LANES}xi32>"

    def halves(bits: str) -> tuple[str, str]:
        shift = e.value(f"arith.constant dense<16> : {it}")
        mask = e.value(f"arith.constant dense<-65536> : {it}")
        even = e.value(f"arith.shli {bits}, {shift} : {it}")
        odd = e.value(f"arith.andi {bits}, {mask} : {it}")
        return (e.value(f"vector.bitcast {even} : {it} to {VT}"), e.value(f"vector.bitcast {odd} : {it} to {VT}"))

    def step(p, acc: list[str]) -> list[str]:
        bs = []
        for b in _b_vectors(e, p):
            bs.append(halves(e.value(f"vector.bitcast {b} : vector<32xbf16> to {it}")))
        new = []
        for i in range(mr):  # the pair broadcast as an i32 (one load), widened in the vector
            a_even, a_odd = halves(e.value(f"vector.broadcast {_pair_of_a(e, i, p)} : i32 to {it}"))
            for v in range(nv):
                first = e.value(f"vector.fma {a_even}, {bs[v][0]}, {acc[i * nv + v]} : {VT}")
                new.append(e.value(f"vector.fma {a_odd}, {bs[v][1]}, {first} : {VT}"))
        return new

    return step
