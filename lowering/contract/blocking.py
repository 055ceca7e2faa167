"""Cache blocking of a contraction's dim groups, the loops over blocks and over the units of a block, and whether
C's tiles are stored non-temporally (shared by the f32 and the bf16 GEMMs).

M, N and K are each cut into blocks of about `mc` rows, `nc` columns and `kc` depth (`ContractOptions`):
dims before the group's split dim one at a time, the split dim in chunks, the dims after it whole.
`Loops` emits the loop nests over them that packing (`packing.py`) and the driver (`emit.py`) share.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from slicer.core.passes import OptionError

from ..emitter import Emitter, Index
from ..memref_facts import NT_BYTES, VECTOR_BYTES
from .analysis import FLOAT_BYTES, Contraction
from .matrix_units import AUTO, BF16_UNITS


@dataclass(frozen=True)
class ContractOptions:
    """Register tile (`mr` rows x `nv` vectors), cache blocks (`mc` rows, `nc` columns, `kc` depth), k unroll;
    the units of contractions of bf16 operands (`bf16_units`: `auto`, the target's best, or one forced:
    `amx`, `avx512bf16`, `f32`; see `matrix_units.py`). The sizes are the f32 GEMM's; the bf16 GEMM has its own
    blocks (`bf16_gemm.BF16_BLOCKS`) and takes `unroll` only."""

    mr: int = 8
    nv: int = 2
    mc: int = 64
    nc: int = 1024
    kc: int = 256
    unroll: int = 4
    bf16_units: str = AUTO

    def __post_init__(self) -> None:
        if self.mr < 1 or self.nv < 1 or self.unroll < 1 or min(self.mc, self.nc, self.kc) < 1:
            options = {k: getattr(self, k) for k in ("mr", "nv", "mc", "nc", "kc", "unroll")}
            raise OptionError(f"slicer-kernel-contract: sizes must be positive, got {options}")
        if self.bf16_units not in (AUTO, *BF16_UNITS):
            raise OptionError(f"slicer-kernel-contract: bf16-units must be one of {', '.join((AUTO, *BF16_UNITS))}, "
                              f"got '{self.bf16_units}'")


@dataclass
class Blocking:
    """Cache blocks of one dim group: dims before `split` one at a time, `split` in chunks, the rest whole.

    Sizes are in units: elements, except the innermost dim of M and N, counted in register tiles.
    """

    dims: list[int]
    sizes: list[int]  # elements
    unit: int
    split: int
    chunk: int

    @property
    def units(self) -> list[int]:
        return self.sizes[:-1] + [-(-self.sizes[-1] // self.unit)]

    @property
    def inner(self) -> int:
        return prod(self.units[self.split + 1:])

    @property
    def max_units(self) -> int:
        return self.chunk * self.inner


def blocking(dims: list[int], sizes: list[int], unit: int, target_units: int) -> Blocking:
    units = sizes[:-1] + [-(-sizes[-1] // unit)]
    target = max(1, target_units)
    split = 0
    for s in range(len(units) - 1, -1, -1):
        if prod(units[s:]) > target:
            split = s
            break
    else:
        return Blocking(dims, sizes, unit, 0, units[0])
    inner = prod(units[split + 1:])
    want = max(1, target // inner)
    size = units[split]
    # Prefer a divisor of the split dim (static block sizes) not much smaller than the target.
    chunk = want
    for c in range(want, max(1, want // 2) - 1, -1):
        if size % c == 0:
            chunk = c
            break
    return Blocking(dims, sizes, unit, split, min(chunk, size))


@dataclass
class Block:
    """One cache block: the value of each dim before the split, the split's start and length (units)."""

    fixed: dict[int, Index]
    start: Index
    length: Index
    first: bool | str = True  # whether this is the group's first block (static, or an i1 SSA value)


class Loops:
    """One contraction's generator state (emitter, tile sizes, blockings) and its block loops."""

    def __init__(self, c: Contraction, options: ContractOptions, name: str, ukernel: str):
        self.c = c
        self.o = options
        self.name = name
        self.ukernel = ukernel
        self.e = Emitter()
        self.false = ""  # the i1 false of the function being emitted (set by the driver that emits one)
        self.t = c.element
        self.lanes = VECTOR_BYTES // FLOAT_BYTES[self.t]
        self.mr = options.mr
        self.nr = options.nv * self.lanes
        self.vt = f"vector<{self.lanes}x{self.t}>"
        r = c.ranges
        self.mb = blocking(c.m, [r[d] for d in c.m], self.mr, max(1, options.mc // self.mr))
        self.nb = blocking(c.n, [r[d] for d in c.n], self.nr, max(1, options.nc // self.nr))
        self.kb = blocking(c.k, [r[d] for d in c.k], 1, options.kc)
        self.args = [f"%in{i}" for i in range(len(c.inputs))]
        self.cap = [f"%cap{i}" for i in range(len(c.captured))]

    # -- the nest ----------------------------------------------------------------------------------
    def nest(self, on_k_block, on_m_block, panel_offset, on_tile) -> None:
        """The GEMM's loop nest (the package docstring's), shared by the generators: the batch dims, blocks of N,
        of K and of M, then the panels of the N block and the row tiles of the M block. What differs is given:
        `on_k_block(nblock, kblock, fixed)` packs B's block and returns its depth (`kc`, whatever the generator
        needs of it), `on_m_block(mblock, kblock, kc, fixed)` packs A's, `panel_offset(plin, kc)` is a panel's
        offset in packed B, `on_tile(where, kblock, kc, boff, tlin, height, width)` runs one register tile
        (`where`: loop dim -> index of the tile's corner). `fixed` holds the batch indices and the K block's
        fixed outer K dims."""
        c, e, r = self.c, self.e, self.c.ranges

        def batch_loops(level: int, point: dict) -> None:
            if level == len(c.batch):
                self.blocks(self.nb, lambda nblock: n_block(point, nblock))
                return
            with e.loop(0, r[c.batch[level]]) as v:
                batch_loops(level + 1, {**point, c.batch[level]: v})

        def n_block(point, nblock):
            def k_block(kblock):
                fixed = {**point, **{self.kb.dims[i]: v for i, v in kblock.fixed.items()}}
                kc = on_k_block(nblock, kblock, fixed)

                def m_block(mblock):
                    on_m_block(mblock, kblock, kc, fixed)

                    def panel(plin, ndims, width):
                        boff = panel_offset(plin, kc)

                        def tile(tlin, mdims, height):
                            on_tile({**point, **ndims, **mdims}, kblock, kc, boff, tlin, height, width)

                        self.enumerate(self.mb, mblock, tile)

                    self.enumerate(self.nb, nblock, panel)

                self.blocks(self.mb, m_block)

            self.blocks(self.kb, k_block)

        batch_loops(0, {})

    def function_text(self) -> str:
        """The generated function: its signature (inputs, `%out`, the epilogue's addends, captured values) around the
        emitted body."""
        c = self.c
        inputs = ", ".join(f"{a}: {op.type_text}" for a, op in zip(self.args, c.inputs))
        caps = "".join(f", {n}: {v.type}" for n, v in zip(self.cap, c.captured))
        addends = "".join(f", %addend{i}: {a.type_text}" for i, a in enumerate(c.addends))
        head = f"func.func private @{self.name}({inputs}, %out: {c.output.type_text}{addends}{caps}) {{"
        return "\n".join([head, self.e.body(), "  return", "}"])

    # -- blocks ------------------------------------------------------------------------------------
    def blocks(self, b: Blocking, body) -> None:
        """Loops over the blocks of `b`, calling body(Block)."""
        e = self.e
        units = b.units

        def first(fixed: dict, start: Index) -> bool | str:
            flags = [e.cmp("eq", v, 0) for v in list(fixed.values()) + [start]]
            if any(f is False for f in flags):
                return False
            dynamic = [f for f in flags if f is not True]
            result: bool | str = True
            for f in dynamic:
                result = f if result is True else e.value(f"arith.andi {result}, {f} : i1", "b")
            return result

        def outer(level: int, fixed: dict) -> None:
            if level == b.split:
                count = -(-units[b.split] // b.chunk)
                if count == 1:
                    body(Block(fixed, 0, units[b.split], first(fixed, 0)))
                    return
                with e.loop(0, units[b.split], b.chunk) as start:
                    length = b.chunk if units[b.split] % b.chunk == 0 else e.min(b.chunk, e.sub(units[b.split], start))
                    body(Block(fixed, start, length, first(fixed, start)))
                return
            with e.loop(0, units[level]) as v:
                outer(level + 1, {**fixed, level: v})

        outer(0, {})

    def enumerate(self, b: Blocking, block: Block, body, step: int = 1) -> None:
        """Loops over the units of one block: body(linear index in block, {dim: element index}, width).

        `width` is the tile's extent along the innermost dim (static int, or SSA when the last tile
        may be partial): for M/N the innermost dim's element index is the tile start. With `step`, the
        innermost dim advances by `step` units (its extent must be a static multiple: `steppable`).
        """
        e = self.e
        units = b.units
        inner_strides = [prod(units[i + 1:]) for i in range(len(units))]

        def level(i: int, values: dict, linear: Index) -> None:
            if i == len(units):
                dims = {}
                for j, d in enumerate(b.dims):
                    v = values[j]
                    dims[d] = e.mul(v, b.unit) if j == len(units) - 1 else v
                last = len(units) - 1
                size = b.sizes[last]
                if b.unit == 1 or size % b.unit == 0:
                    width: Index = b.unit
                else:
                    width = e.min(b.unit, e.sub(size, dims[b.dims[last]]))
                body(linear, dims, width)
                return
            if i < b.split:
                values[i] = block.fixed[i]
                level(i + 1, values, linear)
                return
            stride = step if i == len(units) - 1 else 1
            if i == b.split:
                with e.loop(block.start, e.add(block.start, block.length), stride) as v:
                    values = {**values, i: v}
                    level(i + 1, values, e.mul(e.sub(v, block.start), inner_strides[i]))
                return
            with e.loop(0, units[i], stride) as v:
                level(i + 1, {**values, i: v}, e.add(linear, e.mul(v, inner_strides[i])))

        level(0, {}, 0)

    @staticmethod
    def steppable(b: Blocking, step: int) -> bool:
        """Whether every block's extent along the innermost dim is a static multiple of `step`."""
        units = b.units
        last = len(units) - 1
        if b.split < last:
            return units[last] % step == 0
        return units[last] % b.chunk == 0 and b.chunk % step == 0

    def nontemporal_flag(self) -> str:
        """i1: store C tiles with non-temporal stores.

        When C starts at zero and K fits in one block, every tile is stored exactly once; for a large C
        (attention's 64 MiB scores) regular stores first read each line (write-allocate), so
        non-temporal stores halve C's memory traffic. Needs 64-byte aligned tile rows: static strides,
        plus the base address checked at run time.
        """
        c, e = self.c, self.e
        out = c.output
        element = FLOAT_BYTES[self.c.element]
        single_k = self.kb.units[self.kb.split] <= self.kb.chunk and all(v == 1 for v in self.kb.units[: self.kb.split])
        strides_ok = (
            all(s * element % VECTOR_BYTES == 0 for s in out.strides[:-1]) and self.nr * element % VECTOR_BYTES == 0
        )
        _, offset = out.type.get_strides_and_offset()
        if not (c.zero_init and single_k and c.direct_c and strides_ok and prod(out.type.shape) * element >= NT_BYTES
                and not out.type.is_dynamic_stride_or_offset(offset)):
            return self.false
        pointer = e.value(f"memref.extract_aligned_pointer_as_index %out : {out.type_text} -> index")
        low = e.value(f"arith.remui {e.idx(e.add(pointer, offset * element))}, {e.idx(VECTOR_BYTES)} : index")
        return e.value(f"arith.cmpi eq, {low}, {e.idx(0)} : index", "b")
