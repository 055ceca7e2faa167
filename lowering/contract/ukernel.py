"""The micro-kernel: C[MR x NR] += Ap[tile] * Bp[panel] over a block's k, the tile held in registers.

One function per element type and tile shape, shared by the module's contractions. It keeps the
MR x NR tile in MR * nv vector registers (8 x 2 zmm for f32), loads nv vectors of B and broadcasts MR
scalars of A per k, unrolled by `unroll`; `%nt` stores the tile with non-temporal stores (see
`emit.Gemm.nontemporal_flag`).

The accumulators start at zero and the block's sum is added to C at the end (unless `%zero`: C starts at
zero, so the sum is stored as it is), as BLIS and OpenBLAS do, rather than loading C into the accumulators:
a K of many blocks is then summed in two levels (each block's `kc` products, then the blocks), not in one
chain of K additions. Same work (one vector add per register against a load), and the rounding error of
a long contraction grows with sqrt(kc) + sqrt(K / kc) instead of sqrt(K): measured on a [256, 2048] x
[2048, 256] matmul against float64, 3.2x torch's float32 error before, see benchmarks/numerics.py.
"""

from __future__ import annotations

from ..emitter import Emitter, Index
from ..memref_facts import VECTOR_BYTES
from .analysis import FLOAT_BYTES


def ukernel_text(name: str, element: str, mr: int, nv: int, unroll: int) -> str:
    """C[mr x nr] (= 0 if %zero) += sum_k Ap[aoff + k*mr + r] * Bp[boff + k*nr + j], the tile in registers."""
    lanes = VECTOR_BYTES // FLOAT_BYTES[element]
    nr = nv * lanes
    vt = f"vector<{lanes}x{element}>"
    tile = f"memref<{mr}x{nr}x{element}, strided<[?, 1], offset: ?>>"
    e = Emitter("u")
    count = mr * nv
    types = ", ".join([vt] * count)
    zeros = e.value(f"arith.constant dense<0.0> : {vt}")
    main = e.value(f"arith.remui %kc, {e.idx(unroll)} : index")
    main = e.value(f"arith.subi %kc, {main} : index")
    step = _k_step(e, element, mr, nv, lanes)
    results: list[str] = []
    with e.loop_carried(0, main, unroll, [zeros] * count, vt, results) as (k, carried):
        results[:] = step(k, carried, unroll)
    block: list[str] = []
    with e.loop_carried(main, "%kc", 1, results, vt, block) as (k, carried):
        block[:] = step(k, carried, 1)
    summed = e.fresh("sum")
    e.line(f"{summed}:{count} = scf.if %zero -> ({types}) {{")
    e.line(f"  scf.yield {', '.join(block)} : {types}")
    e.line("} else {")
    e.depth += 1
    added = []
    for i in range(mr):
        for v in range(nv):
            old = e.value(f"vector.load %c[{e.idx(i)}, {e.idx(v * lanes)}] : {tile}, {vt}")
            added.append(e.value(f"arith.addf {old}, {block[i * nv + v]} : {vt}"))
    e.line(f"scf.yield {', '.join(added)} : {types}")
    e.depth -= 1
    e.line("}")
    _store_tile(e, [f"{summed}#{i}" for i in range(count)], tile, vt, mr, nv, lanes)
    head = (f"func.func private @{name}(%ap: memref<?x{element}>, %aoff: index, %bp: memref<?x{element}>, "
            f"%boff: index, %c: {tile}, %kc: index, %zero: i1, %nt: i1) {{")
    return "\n".join([head, e.body(), "  return", "}"])


def _k_step(e: Emitter, element: str, mr: int, nv: int, lanes: int):
    """step(k, accumulators, copies): the FMAs of `copies` consecutive k's; returns the new accumulators."""
    nr = nv * lanes
    vt = f"vector<{lanes}x{element}>"

    def step(k: Index, carried: list[str], copies: int) -> list[str]:
        current = carried
        for u in range(copies):
            ku = e.add(k, u)
            bbase = e.add("%boff", e.mul(ku, nr))
            abase = e.add("%aoff", e.mul(ku, mr))
            bs = [
                e.value(f"vector.load %bp[{e.idx(e.add(bbase, v * lanes))}] : memref<?x{element}>, {vt}")
                for v in range(nv)
            ]
            new = []
            for i in range(mr):
                a = e.value(f"memref.load %ap[{e.idx(e.add(abase, i))}] : memref<?x{element}>")
                ab = e.value(f"vector.broadcast {a} : {element} to {vt}")
                for v in range(nv):
                    new.append(e.value(f"vector.fma {ab}, {bs[v]}, {current[i * nv + v]} : {vt}"))
            current = new
        return current

    return step


def _store_tile(e: Emitter, tail: list[str], tile: str, vt: str, mr: int, nv: int, lanes: int) -> None:
    """Store the accumulators into C, with non-temporal stores under `%nt` (the tile is written once)."""
    e.line("scf.if %nt {")
    e.depth += 1
    for i in range(mr):
        for v in range(nv):
            e.line(f"vector.store {tail[i * nv + v]}, %c[{e.idx(i)}, {e.idx(v * lanes)}] "
                   f"{{alignment = {VECTOR_BYTES} : i64, nontemporal = true}} : {tile}, {vt}")
    e.depth -= 1
    e.line("} else {")
    e.depth += 1
    for i in range(mr):
        for v in range(nv):
            e.line(f"vector.store {tail[i * nv + v]}, %c[{e.idx(i)}, {e.idx(v * lanes)}] : {tile}, {vt}")
    e.depth -= 1
    e.line("}")
