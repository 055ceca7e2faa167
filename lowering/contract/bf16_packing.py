"""Packing bf16 operands into the panels of the bf16 micro-kernels (`bf16_ukernels.py`).

`Ap[tile][row][k]`: MR rows of the block's k, contiguous along k (an AMX A tile is 16 rows x 32 k of it;
the vector kernels broadcast a pair (k, k+1) of a row). `Bp[panel][k / 2][column][k % 2]`: 32 columns, the
pair (k, k + 1) of each column side by side (VNNI). Both are padded with zeros: k up to `kcp` (a multiple of
32 for AMX, of 2 otherwise), rows and columns past the operand's edge.

Operands are bf16 inputs read as they are (the analysis checks each side is one bf16 input, maybe widened
by `extf`): packing copies bits, it never rounds. Ways, fastest first: A contiguous along k copies rows with
vectors; B contiguous along N loads two k rows and interleaves them with one shuffle per 32 values; B
contiguous along k (a Linear layer's [out, in] weight) copies pairs as 32-bit words; any other layout copies
element by element.
"""

from __future__ import annotations

from ..emitter import Index
from .blocking import Block, Blocking, Loops

VEC = 32
"""bf16 elements per vector of the copies (64 bytes)."""
LANES = 16
"""32-bit words per vector: B's pairs transpose as 16 x 16 words."""


class Bf16Packer(Loops):
    """The packing loops of a bf16 contraction: set `units`, `a_input`, `b_input`, `pad` before use."""

    a_input: int
    b_input: int
    pad: int

    def round_up(self, value: Index, to: int) -> Index:
        e = self.e
        if isinstance(value, int):
            return -(-value // to) * to
        bumped = e.add(value, to - 1)
        return e.value(f"arith.muli {e.value(f'arith.divui {bumped}, {e.idx(to)} : index')}, {e.idx(to)} : index")

    def _load(self, index: int, point: dict[int, Index], width: int | None = None) -> str:
        e = self.e
        operand = self.c.inputs[index]
        coords = e.indices(point[d] for d in operand.dims)
        if width is None:
            return e.value(f"memref.load {self.args[index]}[{coords}] : {operand.type_text}")
        return e.value(f"vector.load {self.args[index]}[{coords}] : {operand.type_text}, vector<{width}xbf16>")

    def _zero_unit(self, buffer: str, base: Index, end: Index, condition: bool | str) -> None:
        """buffer[base : base + end] = 0 when `condition` (static, or i1): an edge unit, or a k not padded."""
        if condition is False:
            return
        e = self.e
        zeros = e.value("arith.constant dense<0.0> : vector<8xbf16>")

        def fill():  # a unit holds a multiple of 8 bf16 (`bf16_ukernels.bf16_mr`)
            with e.loop(0, end, 8) as offset:
                e.line(f"vector.store {zeros}, {buffer}[{e.idx(e.add(base, offset))}] : memref<?xbf16>, vector<8xbf16>")

        if condition is True:
            fill()
        else:
            with e.if_(condition):
                fill()

    def _offset(self, is_a: bool, base: Index, lane: Index, k: Index, kcp: Index) -> Index:
        """Where element (lane, k) of a unit goes: A row-major along k, B in pairs along k."""
        e = self.e
        if is_a:
            return e.add(e.add(base, e.mul(lane, kcp)), k)
        pair: Index
        parity: Index
        if isinstance(k, int):
            pair, parity = k // 2, k % 2
        else:
            pair = e.value(f"arith.divui {k}, {e.idx(2)} : index")
            parity = e.value(f"arith.remui {k}, {e.idx(2)} : index")
        return e.add(e.add(base, e.mul(pair, 2 * self.nr)), e.add(e.mul(lane, 2), parity))

    def pack_bf16(self, is_a: bool, group: Blocking, block: Block, kblock: Block, buffer: str, kc: Index,
                  kcp: Index, fixed: dict[int, Index], only_partial: bool = False) -> None:
        """The panels of one side for one (M or N block, K block): buffer[unit] as the module docstring says;
        `only_partial`: the units narrower than a tile only (A read in place, `bf16_gemm.Bf16Gemm.a_in_place`)."""
        e = self.e
        index = self.a_input if is_a else self.b_input
        operand = self.c.inputs[index]
        unit = self.mr if is_a else self.nr
        lane_dim = group.dims[-1]
        k0 = self.kb.dims[-1]
        # The block's k's as runs along the innermost K dim k0: one run when k0 is the dim the block cuts (or
        # the only one), else one per point of the outer K dims (a whole k0 each). B's pairs must not straddle
        # two runs: runs of odd length pack element by element.
        single_run = self.kb.split == len(self.kb.dims) - 1
        runs_ok = single_run or is_a or self.kb.sizes[-1] % 2 == 0
        along_k = runs_ok and operand.stride_of(k0) == 1
        along_lane = runs_ok and operand.stride_of(lane_dim) == 1

        def unit_body(linear, dims, width):
            base = e.mul(linear, e.mul(unit, kcp))
            point0 = {**fixed, **dims}
            partial, unpadded = e.cmp("ne", width, unit), e.cmp("ne", kc, kcp)
            self._zero_unit(buffer, base, e.mul(unit, kcp), _either(e, partial, unpadded))
            whole = isinstance(width, int) and width == unit
            if not runs_ok:
                with e.loop(0, width) as lane:
                    point = {**point0, lane_dim: e.add(dims[lane_dim], lane)}
                    self._copy_elements(is_a, index, point, kblock, kcp, buffer, base, lane)
                return

            def run(kdims: dict, koff: Index, kstart: Index, krun: Index) -> None:
                rbase = e.add(base, koff if is_a else e.mul(koff, self.nr))  # B: pair koff/2 of 2 * nr values
                point = {**point0, **kdims}
                if not is_a and along_lane and whole:
                    self._interleaved_rows(index, point, lane_dim, k0, kstart, krun, buffer, rbase)
                    return
                done: Index = 0  # the k's packed by in-register transposes (a multiple of their group)
                if whole and ((along_k and not is_a) or (along_lane and is_a)):
                    done = self._transposed(is_a, index, point, lane_dim, k0, kstart, krun, kcp, buffer, rbase)
                if done == krun:
                    return
                with e.loop(0, width) as lane:
                    at = {**point, lane_dim: e.add(dims[lane_dim], lane)}
                    self._copy_along_k(is_a, index, at, k0, kstart, krun, kcp, buffer, rbase, lane, done)

            if single_run:
                run({}, 0, kblock.start, kc)
            else:
                outer = Blocking(self.kb.dims[:-1], self.kb.sizes[:-1], 1, self.kb.split, self.kb.chunk)
                length = self.kb.sizes[-1]
                self.enumerate(outer, kblock, lambda r, kdims, _: run(kdims, e.mul(r, length), 0, length))

        def partial_unit(linear, dims, width):
            narrower = e.cmp("ne", width, unit)
            if narrower is True:
                unit_body(linear, dims, width)
            elif narrower is not False:
                with e.if_(narrower):
                    unit_body(linear, dims, width)

        self.enumerate(group, block, partial_unit if only_partial else unit_body)

    def _copy_elements(self, is_a, index, point0, kblock, kcp, buffer, base, lane) -> None:
        e = self.e

        def k_body(klin, kdims, _):
            value = self._load(index, {**point0, **kdims})
            offset = self._offset(is_a, base, lane, klin, kcp)
            e.line(f"memref.store {value}, {buffer}[{e.idx(offset)}] : memref<?xbf16>")

        self.enumerate(self.kb, kblock, k_body)

    def _copy_along_k(self, is_a, index, point0, k0, kstart, kc, kcp, buffer, base, lane, start: Index = 0) -> None:
        """k's [start, kc) of one row of A or column of B, along a single K dim: where the operand is contiguous
        along k, A's in vectors of 32 and B's in 32-bit pairs; the rest element by element."""
        e = self.e
        chunk = VEC if is_a else 2
        full: Index = start
        if self.c.inputs[index].stride_of(k0) == 1:
            span = e.sub(kc, start)
            count = (
                e.value(f"arith.divui {e.idx(span)}, {e.idx(chunk)} : index")
                if isinstance(span, str)
                else span // chunk
            )
            full = e.add(start, e.mul(count, chunk))
            if count != 0:
                with e.loop(start, full, chunk) as k:
                    value = self._load(index, {**point0, k0: e.add(kstart, k)}, chunk)
                    offset = self._offset(is_a, base, lane, k, kcp)
                    e.line(f"vector.store {value}, {buffer}[{e.idx(offset)}] : memref<?xbf16>, vector<{chunk}xbf16>")
        if isinstance(kc, int) and isinstance(full, int) and full >= kc:
            return
        with e.loop(full, kc) as k:
            value = self._load(index, {**point0, k0: e.add(kstart, k)})
            e.line(f"memref.store {value}, {buffer}[{e.idx(self._offset(is_a, base, lane, k, kcp))}] : memref<?xbf16>")

    def _transposed(self, is_a, index, point0, lane_dim, k0, kstart, kc, kcp, buffer, base) -> Index:
        """The first k's of a whole unit, a group at a time, by square transposes in registers: B contiguous
        along k (16 columns x 16 pairs as 32-bit words: 32 k), A contiguous along M (n rows x n k, n = 16 or
        the tile's 8). Returns how many k's it packed (a multiple of the group; 0 when kc is smaller)."""
        e = self.e
        n = LANES if not is_a else min(LANES, self.mr & -self.mr)  # a power of two dividing the tile's rows
        depth = 2 * n if not is_a else n  # k's per group
        count = e.value(f"arith.divui {e.idx(kc)}, {e.idx(depth)} : index") if isinstance(kc, str) else kc // depth
        if count == 0:
            return 0
        done = e.mul(count, depth)
        unit = self.mr if is_a else self.nr
        if not is_a:
            wide, word = f"vector<{2 * n}xbf16>", f"vector<{n}xi32>"
        else:
            wide = word = f"vector<{n}xbf16>"
        with e.loop(0, done, depth) as k:
            for part in range(unit // n):
                rows = []
                for r in range(n):  # B: column part*n + r along k; A: k + r along M
                    if is_a:
                        point = {**point0, k0: e.add(kstart, e.add(k, r)), lane_dim: e.add(point0[lane_dim], part * n)}
                        rows.append(self._load(index, point, n))
                    else:
                        point = {**point0, k0: e.add(kstart, k), lane_dim: e.add(point0[lane_dim], part * n + r)}
                        vector = self._load(index, point, 2 * n)
                        rows.append(e.value(f"vector.bitcast {vector} : {wide} to {word}"))
                for j, vector in enumerate(_transpose(e, rows, word)):
                    if is_a:  # row part*n + j of the tile, k's [k, k + n)
                        offset = e.add(e.add(base, e.mul(part * n + j, kcp)), k)
                        e.line(f"vector.store {vector}, {buffer}[{e.idx(offset)}] : memref<?xbf16>, {wide}")
                    else:  # pair k/2 + j, columns [part*n, part*n + n)
                        pair = e.add(
                            e.value(f"arith.divui {e.idx(k)}, {e.idx(2)} : index") if isinstance(k, str) else k // 2, j
                        )
                        offset = e.add(e.add(base, e.mul(pair, 2 * self.nr)), 2 * n * part)
                        halves = e.value(f"vector.bitcast {vector} : {word} to {wide}")
                        e.line(f"vector.store {halves}, {buffer}[{e.idx(offset)}] : memref<?xbf16>, {wide}")
        return done

    def _interleaved_rows(self, index, point0, lane_dim, k0, kstart, kc, buffer, base) -> None:
        """A full B panel contiguous along N: rows k and k + 1 (32 columns each) interleaved into the pair layout."""
        e = self.e
        lo = ", ".join(f"{j}, {j + VEC}" for j in range(VEC // 2))
        hi = ", ".join(f"{j}, {j + VEC}" for j in range(VEC // 2, VEC))
        vt = f"vector<{VEC}xbf16>"

        def store_pair(p, first: str, second: str):
            for half, mask in enumerate((lo, hi)):
                mixed = e.value(f"vector.shuffle {first}, {second} [{mask}] : {vt}, {vt}")
                offset = e.add(e.add(base, e.mul(p, 2 * self.nr)), half * VEC)
                e.line(f"vector.store {mixed}, {buffer}[{e.idx(offset)}] : memref<?xbf16>, {vt}")

        pairs = kc // 2 if isinstance(kc, int) else e.value(f"arith.divui {kc}, {e.idx(2)} : index")
        if pairs != 0:
            with e.loop(0, pairs) as p:
                k = e.add(kstart, e.mul(p, 2))
                first = self._load(index, {**point0, k0: k}, VEC)
                second = self._load(index, {**point0, k0: e.add(k, 1)}, VEC)
                store_pair(p, first, second)
        odd = kc % 2 == 1 if isinstance(kc, int) else e.cmp("ne", e.value(f"arith.remui {kc}, {e.idx(2)} : index"), 0)
        if odd is False:
            return

        def last():
            first = self._load(index, {**point0, k0: e.add(kstart, e.sub(kc, 1))}, VEC)
            store_pair(pairs, first, e.value(f"arith.constant dense<0.0> : {vt}"))

        if odd is True:
            last()
        else:
            with e.if_(odd):
                last()


def _either(e, a: bool | str, b: bool | str) -> bool | str:
    """a or b, folded where static."""
    if a is True or b is True:
        return True
    if a is False:
        return b
    if b is False:
        return a
    return e.value(f"arith.ori {a}, {b} : i1", "b")


def _transpose(e, rows: list[str], vtype: str) -> list[str]:
    """The columns of the square of `rows` (n vectors of n lanes, n a power of two), by log2(n) stages of
    shuffles: at each stage, vector i and vector i + n/2 are interleaved by halves."""
    n = len(rows)
    labels = [[(r, c) for c in range(n)] for r in range(n)]
    low = [v for j in range(n // 2) for v in (j, n + j)]
    high = [v for j in range(n // 2, n) for v in (j, n + j)]
    for _ in range(n.bit_length() - 1):
        new: list[str] = [""] * n  # every slot is filled below
        new_labels: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        for i in range(n // 2):
            for slot, idx in ((2 * i, low), (2 * i + 1, high)):
                both = labels[i] + labels[i + n // 2]
                new_labels[slot] = [both[j] for j in idx]
                new[slot] = e.value(f"vector.shuffle {rows[i]}, {rows[i + n // 2]} [{', '.join(map(str, idx))}] : "
                                    f"{vtype}, {vtype}")
        rows, labels = new, new_labels
    assert all(labels[c] == [(r, c) for r in range(n)] for c in range(n)), "transpose network"
    return rows
