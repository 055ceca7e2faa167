"""Contractions as packed GEMMs generated for this CPU (the `slicer-kernel-contract` step).

Every bufferized `linalg.generic` whose body is `out + f_A * f_B` (matmul, batch_matmul, einsum-style
generics with any permutation of operand dims, attention's `sd,dhe->hse`, a softmax division fused into
`p @ v`, a scale fused into `q @ k^T`, ...) is replaced by a call to a generated function: a BLIS-style
loop nest over packed panels around one register-tile micro-kernel.

Classification (`analyze`): the body's product is split into factors (operands of the `mulf` tree);
each factor depends on some loop dims through the inputs it reads. The factors are assigned to two sides
so that the parallel dims split into
- M: dims of side A only, N: dims of side B only, batch: dims of both; K: the reduction dims;
- C's innermost (stride-1) dim must be an N dim: the micro-kernel stores vectors along it.
Each group may hold several dims (attention's `sd,dhe->hse` has N = (h, e); its output projection has
K = (h, e)); groups are ordered by C's strides (M, N, batch) and by the B side's strides (K).

Generated loop nest (static shapes, one function per contraction):

    for batch dims:
      for N blocks (about `nc` columns):          # a block = whole inner dims x a chunk of one dim
        for K blocks (about `kc`):
          pack B:  Bp[panel][k][NR] = f_B(...)   # NR = nv vectors; zero padded past the edge
          for M blocks (about `mc` rows):
            pack A:  Ap[tile][k][MR] = f_A(...)  # the A-side expression (e.g. ex / den) runs here
            for panels of the N block:            # a kc x NR panel of B stays in L1 ...
              for row tiles of the M block:       # ... while the A block streams from L2
                micro-kernel: C[MR x NR] += Ap[tile] * Bp[panel] over the block's k

The micro-kernel (one per element type, shared by the module) keeps the MR x NR tile in MR * nv vector
registers (8 x 2 zmm for f32), loads nv vectors of B and broadcasts MR scalars of A per k, unrolled by
`unroll`; edge tiles (M or N not a multiple of the tile) run on a zeroed scratch tile copied in and out.
Packing reads inputs with vector loads where the lane dim is contiguous (B along N, A along M), with
vector loads along K transposed in registers where they are contiguous along K (A[m, k], B[n, k]), and
with scalar loads otherwise, so any operand layout packs into the same panels, as IREE's data tiling
does. Packing costs O(MK + KN) against the O(MNK) micro-kernel work.

C starting at zero (a zero fill before the op, also through copies of a zero buffer; `_zero_before`)
lets the first K block start from zero accumulators, and the fill is dropped when nothing reads it; a
large C written once (one K block) gets non-temporal stores.

Why generated text and not the transform dialect: the loop nest, the packing layout and the register
tile are exactly what the benchmark measures, and a text template keeps each of them explicit
(measured: 180-245 GFLOP/s single-threaded for the f32 contractions of `benchmarks/kernels.py` on this
AVX-512 machine, against OpenBLAS's 100-129). Ops the analysis rejects keep the tile-and-vectorize path
of `vectorize.py`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from itertools import product
from math import prod

from mlir import ir
from mlir.dialects import func as func_d

from slicer.dialect.ops import walk_ops

from .body import emit_op, is_elementwise
from .emitter import Emitter, Index, module_avx512

log = logging.getLogger("slicer.kernels")

_FLOATS = {"f32": 4, "f64": 8}
VECTOR_BYTES = 64  # AVX-512
NT_BYTES = 16 << 20  # outputs at least this large, written once, get non-temporal stores (half the L3 here)


@dataclass(frozen=True)
class ContractOptions:
    """Register tile (`mr` rows x `nv` vectors), cache blocks (`mc` rows, `nc` columns, `kc` depth), k unroll."""

    mr: int = 8
    nv: int = 2
    mc: int = 64
    nc: int = 1024
    kc: int = 256
    unroll: int = 4

    @staticmethod
    def parse(options: dict[str, str]) -> "ContractOptions":
        known = {"mr", "nv", "mc", "nc", "kc", "unroll"}
        unknown = set(options) - known
        if unknown:
            raise ValueError(f"slicer-kernel-contract: unknown option(s) {sorted(unknown)} (known: {', '.join(sorted(known))})")
        result = ContractOptions(**{k: int(v) for k, v in options.items()})
        if result.mr < 1 or result.nv < 1 or result.unroll < 1 or min(result.mc, result.nc, result.kc) < 1:
            raise ValueError(f"slicer-kernel-contract: sizes must be positive, got {options}")
        return result


# ---------------------------------------------------------------------------------------------------
# Analysis
# ---------------------------------------------------------------------------------------------------


@dataclass
class Operand:
    """One memref operand of the generic: its SSA value, type, strides, and the loop dim of each of its dims."""

    value: ir.Value
    type: ir.MemRefType
    dims: tuple[int, ...]  # loop dim indexing each memref dim
    strides: tuple[int, ...]

    @property
    def type_text(self) -> str:
        return str(self.type)

    def stride_of(self, dim: int) -> int | None:
        """Stride of loop dim `dim` in this operand (None if it does not depend on it)."""
        total = 0
        found = False
        for d, s in zip(self.dims, self.strides):
            if d == dim:
                total += s
                found = True
        return total if found else None

    def unit_lane(self, dim: int) -> bool:
        """Whether a vector along loop dim `dim` is one contiguous load: its last memref dim, stride 1."""
        return bool(self.dims) and self.dims[-1] == dim and self.strides[-1] == 1 and self.dims.count(dim) == 1


@dataclass
class Side:
    """The factors of one side of the product and the body ops computing them."""

    factors: list[ir.Value]
    ops: list[ir.Operation]  # body ops in program order, the union of the factors' trees
    inputs: list[int]  # generic input indices read
    dims: set[int]


@dataclass
class Contraction:
    op: ir.Operation
    ranges: list[int]
    inputs: list[Operand]
    output: Operand
    element: str  # element type of C
    a: Side
    b: Side
    batch: list[int]
    m: list[int]
    n: list[int]
    k: list[int]
    captured: list[ir.Value]  # values from outside the body used by it (passed as arguments)
    block_args: list[ir.Value]  # the body's block arguments (inputs..., out)
    direct_c: bool  # C's innermost dim is N0 with stride 1: tiles are vector loads/stores of C
    zero_init: bool = False  # C holds zeros before the op (a zero fill we may have removed)

    def describe(self) -> str:
        letters = "abcdefghijklmnopqrstuvwxyz"

        def names(ds):
            return "".join(letters[d] for d in ds) or "-"

        return (f"batch={names(self.batch)} m={names(self.m)} n={names(self.n)} k={names(self.k)} "
                f"sizes={'x'.join(map(str, self.ranges))} {self.element}{' zero-init' if self.zero_init else ''}")


class NotAContraction(Exception):
    """Why a generic is left to the tile-and-vectorize path."""


def _strides(type_: ir.MemRefType) -> tuple[int, ...]:
    strides, _ = type_.get_strides_and_offset()
    if any(type_.is_dynamic_stride_or_offset(s) for s in strides):
        raise NotAContraction("dynamic strides")
    return tuple(strides)


def _maps(op: ir.Operation) -> list[ir.AffineMap]:
    return [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]


def _operand(value: ir.Value, amap: ir.AffineMap) -> Operand:
    if not isinstance(value.type, ir.MemRefType):
        raise NotAContraction("operand is not a memref")
    type_ = ir.MemRefType(value.type)
    if not type_.has_static_shape:
        raise NotAContraction("dynamic shape")
    dims = []
    for expr in amap.results:
        if not isinstance(expr, ir.AffineDimExpr):
            try:
                expr = ir.AffineDimExpr(expr)
            except (ValueError, TypeError):
                raise NotAContraction("indexing map is not a projection of loop dims") from None
        dims.append(expr.position)
    return Operand(value, type_, tuple(dims), _strides(type_))


def _in_body(value: ir.Value, block: ir.Block) -> bool:
    if isinstance(value, ir.BlockArgument):
        return value.owner == block
    owner = value.owner
    return owner.block == block if hasattr(owner, "block") else owner.operation.block == block


def analyze(op: ir.Operation) -> Contraction:
    """The contraction structure of a bufferized linalg.generic, or NotAContraction(reason)."""
    op = op.operation
    kinds = ["reduction" if "reduction" in str(a) else "parallel" for a in ir.ArrayAttr(op.attributes["iterator_types"])]
    maps = _maps(op)
    n_inputs = len(op.operands) - 1
    if n_inputs < 2 or len(op.results):
        raise NotAContraction("needs >= 2 inputs and one output buffer")
    operands = [_operand(v, m) for v, m in zip(op.operands, maps)]
    inputs, output = operands[:-1], operands[-1]
    element = str(output.type.element_type)
    if element not in _FLOATS:
        raise NotAContraction(f"element type {element}")
    ranges: list[int | None] = [None] * len(kinds)
    for o in operands:
        for d, size in zip(o.dims, o.type.shape):
            if ranges[d] is not None and ranges[d] != size:
                raise NotAContraction("inconsistent loop ranges")
            ranges[d] = size
    if any(r is None for r in ranges):
        raise NotAContraction("a loop dim indexes no operand")
    parallel = {d for d, k in enumerate(kinds) if k == "parallel"}
    reduction = {d for d, k in enumerate(kinds) if k == "reduction"}
    if not reduction or sorted(output.dims) != sorted(parallel) or len(set(output.dims)) != len(output.dims):
        raise NotAContraction("output is not indexed by exactly the parallel dims")

    block = op.regions[0].blocks[0]
    args = list(block.arguments)
    out_arg = args[-1]
    body_ops = [o for o in block.operations]
    yield_op = body_ops[-1]
    if yield_op.name != "linalg.yield" or len(yield_op.operands) != 1:
        raise NotAContraction("body does not yield one value")
    total = yield_op.operands[0]
    add = None if isinstance(total, ir.BlockArgument) else total.owner
    if add is None or add.name != "arith.addf" or len(add.operands) != 2:
        raise NotAContraction("body is not out + product")
    lhs, rhs = add.operands
    if lhs == out_arg:
        product_value = rhs
    elif rhs == out_arg:
        product_value = lhs
    else:
        raise NotAContraction("body is not out + product")

    # Flatten the multiplication tree into factors.
    factors: list[ir.Value] = []
    stack = [product_value]
    while stack:
        value = stack.pop()
        owner = None if isinstance(value, ir.BlockArgument) else value.owner
        if owner is not None and _in_body(value, block) and owner.name == "arith.mulf":
            stack.extend(reversed(list(owner.operands)))
        else:
            factors.append(value)

    op_index = {o: i for i, o in enumerate(body_ops)}

    def tree(value: ir.Value, ops: set, used_args: set, captured: list) -> None:
        if isinstance(value, ir.BlockArgument) and value.owner == block:
            if value == out_arg:
                raise NotAContraction("a factor reads the accumulator")
            used_args.add(value.arg_number)
            return
        if not _in_body(value, block):
            if value not in captured:
                captured.append(value)
            return
        owner = value.owner
        if not is_elementwise(owner):
            raise NotAContraction(f"body op {owner.name} is not elementwise arith/math")
        if owner in ops:
            return
        ops.add(owner)
        for operand in owner.operands:
            tree(operand, ops, used_args, captured)

    captured: list[ir.Value] = []
    factor_info = []
    for f in factors:
        ops: set = set()
        used: set = set()
        tree(f, ops, used, captured)
        dims = set()
        for i in used:
            dims |= set(inputs[i].dims)
        factor_info.append((f, ops, used, dims))
    for c in captured:
        if not isinstance(c.type, (ir.F32Type, ir.F64Type, ir.F16Type, ir.BF16Type, ir.IntegerType, ir.IndexType)):
            raise NotAContraction(f"captured value of type {c.type}")

    variable = [i for i, info in enumerate(factor_info) if info[3]]
    constant = [i for i, info in enumerate(factor_info) if not info[3]]
    if len(variable) < 2 or len(variable) > 8:
        raise NotAContraction("fewer than two factors depend on the loops")

    c_inner = output.dims[int(min(range(len(output.dims)), key=lambda i: output.strides[i]))]
    best = None
    for assignment in product((0, 1), repeat=len(variable)):
        if assignment[0] == 1:
            continue  # each split once: side A holds the first variable factor
        sides = [[variable[i] for i, s in enumerate(assignment) if s == side] for side in (0, 1)]
        if not sides[1]:
            continue
        da = set().union(*(factor_info[i][3] for i in sides[0]))
        db = set().union(*(factor_info[i][3] for i in sides[1]))
        m = (da - db) & parallel
        n = (db - da) & parallel
        batch = da & db & parallel
        if not m or not n or (m | n | batch) != parallel or not reduction <= (da | db):
            continue
        for a_idx, b_idx, mm, nn in ((sides[0], sides[1], m, n), (sides[1], sides[0], n, m)):
            direct = c_inner in nn
            score = (direct, -len(b_idx))
            if best is None or score > best[0]:
                best = (score, a_idx, b_idx, mm, nn, batch)
    if best is None:
        raise NotAContraction("the product does not split into two sides with M and N dims")
    _, a_idx, b_idx, m, n, batch = best
    a_idx = a_idx + constant  # constant factors (e.g. a scale) are applied while packing A

    def side(indices: list[int]) -> Side:
        ops: set = set()
        used: set = set()
        dims: set = set()
        for i in indices:
            ops |= factor_info[i][1]
            used |= factor_info[i][2]
            dims |= factor_info[i][3]
        return Side([factor_info[i][0] for i in indices], sorted(ops, key=lambda o: op_index[o]), sorted(used), dims)

    a_side, b_side = side(a_idx), side(b_idx)
    c_stride = {d: output.stride_of(d) for d in output.dims}
    by_c = lambda ds: sorted(ds, key=lambda d: (-c_stride[d], d))  # noqa: E731 - outer (largest stride) first
    n_order = by_c(n)
    m_order = by_c(m)
    # K dims follow the B side's memory order (B packing reads along them), then A's.
    def k_key(d):
        keys = []
        for i in b_side.inputs + a_side.inputs:
            s = inputs[i].stride_of(d)
            keys.append(-(s if s is not None else 0))
        return (keys, d)

    k_order = sorted(reduction, key=k_key)
    direct = (output.dims[-1] == n_order[-1] and output.strides[-1] == 1)
    return Contraction(op, [int(r) for r in ranges], inputs, output, element, a_side, b_side, by_c(batch), m_order,
                       n_order, k_order, captured, args, direct)


# ---------------------------------------------------------------------------------------------------
# Code generation
# ---------------------------------------------------------------------------------------------------


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


class _Gen:
    def __init__(self, c: Contraction, options: ContractOptions, name: str, ukernel: str):
        self.c = c
        self.o = options
        self.name = name
        self.ukernel = ukernel
        self.e = Emitter()
        self.t = c.element
        self.lanes = VECTOR_BYTES // _FLOATS[self.t]
        self.mr = options.mr
        self.nr = options.nv * self.lanes
        self.vt = f"vector<{self.lanes}x{self.t}>"
        r = c.ranges
        self.mb = blocking(c.m, [r[d] for d in c.m], self.mr, max(1, options.mc // self.mr))
        self.nb = blocking(c.n, [r[d] for d in c.n], self.nr, max(1, options.nc // self.nr))
        self.kb = blocking(c.k, [r[d] for d in c.k], 1, options.kc)
        self.args = [f"%in{i}" for i in range(len(c.inputs))]
        self.cap = [f"%cap{i}" for i in range(len(c.captured))]

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

    # -- expressions -------------------------------------------------------------------------------
    def load_input(self, index: int, point: dict[int, Index], lane_dim: int | None, width: int) -> str:
        """Input `index` at `point` (loop dim -> element index): a vector of `width` along `lane_dim` if given."""
        e = self.e
        operand = self.c.inputs[index]
        coords = e.indices(point[d] for d in operand.dims)
        elem = str(operand.type.element_type)
        if lane_dim is None or operand.stride_of(lane_dim) is None:
            scalar = e.value(f"memref.load {self.args[index]}[{coords}] : {operand.type_text}")
            if lane_dim is None:
                return scalar
            return e.value(f"vector.broadcast {scalar} : {elem} to vector<{width}x{elem}>")
        return e.value(f"vector.load {self.args[index]}[{coords}] : {operand.type_text}, vector<{width}x{elem}>")

    def side_value(self, side: Side, point: dict[int, Index], lane_dim: int | None, width: int | None = None) -> str:
        """The side's product at `point`, re-emitting its body ops (vectors of `width`, default a full
        register, along lane_dim if given)."""
        e = self.e
        c = self.c
        width = width or self.lanes
        env: dict = {}
        for i in side.inputs:
            env[c.block_args[i]] = self.load_input(i, point, lane_dim, width)
        for value, name in zip(c.captured, self.cap):
            if lane_dim is None:
                env[value] = name
            else:
                env[value] = e.value(f"vector.broadcast {name} : {value.type} to vector<{width}x{value.type}>")
        for op in side.ops:
            env[op.results[0]] = emit_op(e, op, env, width if lane_dim is not None else None)
        total = None
        vtype = f"vector<{width}x{self.t}>" if lane_dim is not None else self.t
        for f in side.factors:
            v = env[f]
            total = v if total is None else e.value(f"arith.mulf {total}, {v} : {vtype}")
        return total

    def vectorizable(self, side: Side, lane_dim: int) -> bool:
        for i in side.inputs:
            operand = self.c.inputs[i]
            if operand.stride_of(lane_dim) is not None and not operand.unit_lane(lane_dim):
                return False
        for v in self.c.captured:
            if not isinstance(v.type, (ir.F32Type, ir.F64Type)):
                return False
        for op in side.ops:
            for r in op.results:
                if isinstance(r.type, ir.IndexType):
                    return False
        return True

    # -- packing -----------------------------------------------------------------------------------
    def transposable(self, side: Side, regs: int) -> bool:
        """Whether the side can be read as vectors along K0 and transposed in registers into panels."""
        k0 = self.kb.dims[-1]
        group = min(regs, self.lanes)
        if group & (group - 1) or regs % group:
            return False
        return self.vectorizable(side, k0) and self.steppable(self.kb, self.lanes)

    def transposed_rows(self, side: Side, point0: dict, lane_dim: int, k0: int, kdims: dict, klin: Index,
                        base: Index, regs: int, buffer: str) -> None:
        """Pack `regs` rows x L k's: vector loads along K0, a perfect-shuffle transpose, L contiguous stores.

        Rows go in groups of G = min(regs, L); log2(G) stages pair vector i with i + G/2 and interleave
        lane by lane (`vector.shuffle`, one vpermt2ps each); afterwards vector j holds the k-major chunk j
        of the group's (k, row) block (checked symbolically below).
        """
        e = self.e
        lanes = self.lanes
        group = min(regs, lanes)
        for g in range(regs // group):
            vectors = []
            for r in range(group):
                point = {**point0, **kdims}
                point[lane_dim] = e.add(point0[lane_dim], g * group + r)
                vectors.append(self.side_value(side, point, k0))
            labels = [[(r, k) for k in range(lanes)] for r in range(group)]
            half = group // 2
            lo_idx = [v for j in range(lanes // 2) for v in (j, lanes + j)]
            hi_idx = [v for j in range(lanes // 2, lanes) for v in (j, lanes + j)]
            for _ in range(group.bit_length() - 1):  # log2(group) stages
                new, new_labels = [None] * group, [None] * group
                for i in range(half):
                    for slot, idx in ((2 * i, lo_idx), (2 * i + 1, hi_idx)):
                        both = labels[i] + labels[i + half]
                        new_labels[slot] = [both[j] for j in idx]
                        new[slot] = e.value(f"vector.shuffle {vectors[i]}, {vectors[i + half]} [{', '.join(map(str, idx))}] : {self.vt}, {self.vt}")
                vectors, labels = new, new_labels
            assert _is_k_major(labels, group, lanes), "transpose network"
            for j, vector in enumerate(vectors):
                k_offset = (j * lanes) // group
                offset = e.add(e.add(base, e.mul(e.add(klin, k_offset), regs)), g * group)
                e.line(f"vector.store {vector}, {buffer}[{e.idx(offset)}] : memref<?x{self.t}>, {self.vt}")

    def pack(self, side: Side, group: Blocking, block: Block, kblock: Block, buffer: str, regs: int,
             fixed_dims: dict[int, Index]) -> None:
        """buffer[unit][k][regs] = side value; lanes past the group's edge are zero.

        Three ways, fastest first: vectors along the group's innermost dim when the side's inputs are
        contiguous along it (B[k, n] row-major); vectors along K0 transposed in registers when they are
        contiguous along K0 (A[m, k] row-major, B[n, k]); scalar loads otherwise and for edge tiles.
        """
        e = self.e
        lane_dim = group.dims[-1]
        # Vectors of a whole register, or of the tile's width when it is narrower (A's 8 rows in f32).
        vwidth = self.lanes if regs % self.lanes == 0 else regs if self.lanes % regs == 0 else 0
        vector = bool(vwidth) and self.vectorizable(side, lane_dim)
        transposed = not vector and self.transposable(side, regs)
        kc = e.mul(kblock.length, self.kb.inner)
        zero = e.value(f"arith.constant 0.0 : {self.t}")

        def unit_body(linear, dims, width):
            base = e.mul(linear, e.mul(kc, regs))
            point0 = {**fixed_dims, **dims}
            full = e.cmp("eq", width, regs) if not isinstance(width, int) else True

            def vector_path():
                def k_body(klin, kdims, _):
                    for v in range(regs // vwidth):
                        point = {**point0, **kdims}
                        point[lane_dim] = e.add(dims[lane_dim], v * vwidth)
                        value = self.side_value(side, point, lane_dim, vwidth)
                        offset = e.add(e.add(base, e.mul(klin, regs)), v * vwidth)
                        e.line(f"vector.store {value}, {buffer}[{e.idx(offset)}] : memref<?x{self.t}>, vector<{vwidth}x{self.t}>")
                self.enumerate(self.kb, kblock, k_body)

            def scalar_path(count: Index):
                with e.loop(0, count) as lane:
                    def k_body(klin, kdims, _):
                        point = {**point0, **kdims}
                        point[lane_dim] = e.add(dims[lane_dim], lane)
                        value = self.side_value(side, point, None)
                        offset = e.add(e.add(base, e.mul(klin, regs)), lane)
                        e.line(f"memref.store {value}, {buffer}[{e.idx(offset)}] : memref<?x{self.t}>")
                    self.enumerate(self.kb, kblock, k_body)
                if count != regs:
                    with e.loop(count, regs) as lane:
                        def z_body(klin, kdims, _):
                            offset = e.add(e.add(base, e.mul(klin, regs)), lane)
                            e.line(f"memref.store {zero}, {buffer}[{e.idx(offset)}] : memref<?x{self.t}>")
                        self.enumerate(self.kb, kblock, z_body)

            def transposed_path():
                k0 = self.kb.dims[-1]

                def k_body(klin, kdims, _):
                    self.transposed_rows(side, point0, lane_dim, k0, kdims, klin, base, regs, buffer)
                self.enumerate(self.kb, kblock, k_body, step=self.lanes)

            def full_path():
                if vector:
                    vector_path()
                elif transposed:
                    transposed_path()
                else:
                    scalar_path(regs)

            if full is True:
                full_path()
            else:
                then, otherwise = e.if_else(full)
                with then:
                    full_path()
                with otherwise:
                    scalar_path(width)

        self.enumerate(group, block, unit_body)

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
        r = c.ranges

        def batch_loops(level: int, point: dict) -> None:
            if level == len(c.batch):
                self.blocks(self.nb, lambda nblock: n_block(point, nblock))
                return
            with e.loop(0, r[c.batch[level]]) as v:
                batch_loops(level + 1, {**point, c.batch[level]: v})

        def n_block(point, nblock):
            def k_block(kblock):
                kc = e.mul(kblock.length, self.kb.inner)
                fixed_k = {self.kb.dims[i]: v for i, v in kblock.fixed.items()}
                self.pack(c.b, self.nb, nblock, kblock, bp, nr, {**point, **fixed_k})

                def m_block(mblock):
                    self.pack(c.a, self.mb, mblock, kblock, ap, mr, {**point, **fixed_k})

                    def panel(plin, ndims, width):
                        boff = e.mul(plin, e.mul(kc, nr))

                        def tile(tlin, mdims, height):
                            aoff = e.mul(tlin, e.mul(kc, mr))
                            where = {**point, **ndims, **mdims}
                            zero = kblock.first if c.zero_init else False
                            self.tile(where, aoff, boff, kc, height, width, ap, bp, scratch, scratch_dyn, vzero, tile_type, zero)

                        self.enumerate(self.mb, mblock, tile)

                    self.enumerate(self.nb, nblock, panel)

                self.blocks(self.mb, m_block)

            self.blocks(self.kb, k_block)

        batch_loops(0, {})
        inputs = ", ".join(f"{a}: {op.type_text}" for a, op in zip(self.args, c.inputs))
        caps = "".join(f", {n}: {v.type}" for n, v in zip(self.cap, c.captured))
        head = f"func.func private @{self.name}({inputs}, %out: {c.output.type_text}{caps}) {{"
        return "\n".join([head, e.body(), "  return", "}"])

    def nontemporal_flag(self) -> str:
        """i1: store C tiles with non-temporal stores.

        When C starts at zero and K fits in one block, every tile is stored exactly once; for a large C
        (attention's 64 MiB scores) regular stores first read each line (write-allocate), so
        non-temporal stores halve C's memory traffic. Needs 64-byte aligned tile rows: static strides,
        plus the base address checked at run time.
        """
        c, e = self.c, self.e
        out = c.output
        element = _FLOATS[self.t]
        single_k = self.kb.units[self.kb.split] <= self.kb.chunk and all(v == 1 for v in self.kb.units[: self.kb.split])
        strides_ok = all(s * element % VECTOR_BYTES == 0 for s in out.strides[:-1]) and self.nr * element % VECTOR_BYTES == 0
        _, offset = out.type.get_strides_and_offset()
        if not (c.zero_init and single_k and c.direct_c and strides_ok and prod(out.type.shape) * element >= NT_BYTES
                and not out.type.is_dynamic_stride_or_offset(offset)):
            return self.false
        pointer = e.value(f"memref.extract_aligned_pointer_as_index %out : {out.type_text} -> index")
        low = e.value(f"arith.remui {e.idx(e.add(pointer, offset * element))}, {e.idx(VECTOR_BYTES)} : index")
        return e.value(f"arith.cmpi eq, {low}, {e.idx(0)} : index", "b")

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
            if out.dims.index(m0) > out.dims.index(n0):
                raise AssertionError("direct tiles need M0 before N0 in C")
            view = e.value(f"memref.subview %out[{offsets}] [{sizes}] [{ones}] : {out.type_text} to {sub_type}")
            dyn = e.value(f"memref.cast {view} : {sub_type} to {tile_type}")
            e.line(f"func.call @{self.ukernel}({call_args}, {dyn}, {e.idx(kc)}, {flag}, {self.nt_flag}) : ({call_types}) -> ()")

        def via_scratch(h: Index, w: Index):
            for i in range(mr):
                for v in range(self.o.nv):
                    e.line(f"vector.store {vzero}, {scratch}[{e.idx(i)}, {e.idx(v * self.lanes)}] : memref<{mr}x{nr}x{t}>, {self.vt}")
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
            e.line(f"func.call @{self.ukernel}({call_args}, {scratch_dyn}, {e.idx(kc)}, {flag}, {self.false}) : ({call_types}) -> ()")
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
        if full_h is True:
            cond = full_w
        elif full_w is True:
            cond = full_h
        else:
            cond = e.value(f"arith.andi {full_h}, {full_w} : i1")
        then, otherwise = e.if_else(cond)
        with then:
            direct()
        with otherwise:
            via_scratch(height, width)


def _is_k_major(labels: list[list[tuple[int, int]]], group: int, lanes: int) -> bool:
    """Whether vector j holds the k-major linear chunk j (element (r, k) at k * group + r)."""
    for j, vector in enumerate(labels):
        if [k * group + r for r, k in vector] != list(range(j * lanes, (j + 1) * lanes)):
            return False
    return True


def ukernel_text(name: str, element: str, mr: int, nv: int, unroll: int) -> str:
    """C[mr x nr] (= 0 if %zero) += sum_k Ap[aoff + k*mr + r] * Bp[boff + k*nr + j], the tile in registers."""
    lanes = VECTOR_BYTES // _FLOATS[element]
    nr = nv * lanes
    vt = f"vector<{lanes}x{element}>"
    tile = f"memref<{mr}x{nr}x{element}, strided<[?, 1], offset: ?>>"
    e = Emitter("u")
    count = mr * nv
    types = ", ".join([vt] * count)
    loaded = e.fresh("acc")
    e.line(f"{loaded}:{count} = scf.if %zero -> ({types}) {{")
    zeros = f"%{e.prefix}z"
    e.line(f"  {zeros} = arith.constant dense<0.0> : {vt}")
    e.line(f"  scf.yield {', '.join([zeros] * count)} : {types}")
    e.line("} else {")
    e.depth += 1
    tile_values = [e.value(f"vector.load %c[{e.idx(i)}, {e.idx(v * lanes)}] : {tile}, {vt}") for i in range(mr) for v in range(nv)]
    e.line(f"scf.yield {', '.join(tile_values)} : {types}")
    e.depth -= 1
    e.line("}")
    accs = [f"{loaded}#{i}" for i in range(count)]
    main = e.value(f"arith.remui %kc, {e.idx(unroll)} : index")
    main = e.value(f"arith.subi %kc, {main} : index")

    def step(k: Index, carried: list[str], copies: int) -> list[str]:
        current = carried
        for u in range(copies):
            ku = e.add(k, u)
            bbase = e.add("%boff", e.mul(ku, nr))
            abase = e.add("%aoff", e.mul(ku, mr))
            bs = [e.value(f"vector.load %bp[{e.idx(e.add(bbase, v * lanes))}] : memref<?x{element}>, {vt}") for v in range(nv)]
            new = []
            for i in range(mr):
                a = e.value(f"memref.load %ap[{e.idx(e.add(abase, i))}] : memref<?x{element}>")
                ab = e.value(f"vector.broadcast {a} : {element} to {vt}")
                for v in range(nv):
                    new.append(e.value(f"vector.fma {ab}, {bs[v]}, {current[i * nv + v]} : {vt}"))
            current = new
        return current

    results: list[str] = []
    with e.loop_carried(0, main, unroll, accs, vt, results) as (k, carried):
        results[:] = step(k, carried, unroll)
    tail: list[str] = []
    with e.loop_carried(main, "%kc", 1, results, vt, tail) as (k, carried):
        tail[:] = step(k, carried, 1)
    # %nt: non-temporal stores (the tile is written once and not read soon: see _Gen.nt_flag).
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
    head = (f"func.func private @{name}(%ap: memref<?x{element}>, %aoff: index, %bp: memref<?x{element}>, "
            f"%boff: index, %c: {tile}, %kc: index, %zero: i1, %nt: i1) {{")
    return "\n".join([head, e.body(), "  return", "}"])


def contraction_text(c: Contraction, options: ContractOptions, name: str, ukernel: str, avx512: bool = False) -> str:
    gen = _Gen(c, options, name, ukernel)
    gen.e.avx512 = avx512
    return gen.generate()


# ---------------------------------------------------------------------------------------------------
# The pipeline step
# ---------------------------------------------------------------------------------------------------


_VIEW_SAFE = ("memref.load", "memref.store", "memref.copy", "memref.dealloc", "func.return", "func.call")


def _zero_before(op: ir.Operation, buffer: ir.Value) -> tuple[bool, ir.Operation | None]:
    """Whether `buffer` holds zeros when `op` runs, and the zero fill that may be removed.

    True when a `linalg.fill` of 0.0 into `buffer` comes earlier in the same block and no op in
    between writes it (ops that only read it, like `memref.copy` from it or a linalg input, are fine).
    The fill is returned (removable) only if nothing in between reads the buffer either, since the
    contraction then writes every element first. Buffers with views anywhere are left alone.
    """
    for use in buffer.uses:
        owner = use.owner
        name = owner.name if hasattr(owner, "name") else owner.operation.name
        if not (name.startswith("linalg.") or name in _VIEW_SAFE):
            return False, None
    block = op.block
    ops = list(block.operations)
    index = next(i for i, o in enumerate(ops) if o.operation == op)
    readers = False
    for previous in reversed(ops[:index]):
        previous = previous.operation
        operands = list(previous.operands)
        if buffer not in operands:
            continue
        if _is_fill(previous) and operands[-1] == buffer and _is_zero(operands[0]):
            return True, (None if readers else previous)
        if previous.name == "memref.copy" and operands[1] == buffer and operands[0] != buffer:
            # A copy of a zero buffer (bufferization copies a shared zero fill per use).
            zero, _ = _zero_before(previous, operands[0])
            return zero, (previous if zero and not readers else None)
        if previous.name == "memref.copy" and operands[0] == buffer and operands[1] != buffer:
            readers = True
            continue
        if previous.name.startswith("linalg.") and "operandSegmentSizes" in previous.attributes:
            n_in = list(ir.DenseI32ArrayAttr(previous.attributes["operandSegmentSizes"]))[0]
            if buffer not in operands[n_in:]:
                readers = True
                continue
        return False, None
    return False, None


def _is_fill(op: ir.Operation) -> bool:
    """linalg.fill, or its generalized form: a generic yielding its one scalar input everywhere."""
    if op.name == "linalg.fill":
        return True
    if op.name != "linalg.generic" or len(op.operands) != 2 or isinstance(op.operands[0].type, ir.ShapedType):
        return False
    body = op.regions[0].blocks[0]
    last = list(body.operations)[-1]
    return len(list(body.operations)) == 1 and len(last.operands) == 1 and last.operands[0] == body.arguments[0]


def _is_zero(value: ir.Value) -> bool:
    owner = None if isinstance(value, ir.BlockArgument) else value.owner
    if owner is None or owner.name != "arith.constant":
        return False
    attr = owner.attributes["value"]
    try:
        return ir.FloatAttr(attr).value == 0.0
    except (ValueError, TypeError):
        return False


def contract_module(module: ir.Module, options: ContractOptions = ContractOptions()) -> list[str]:
    """Replace every contraction generic of `module` by a call to a generated packed GEMM.

    Returns one line per replaced op (its classification); ops the analysis rejects stay.
    """
    context = module.context
    avx512 = module_avx512(module)
    replaced: list[str] = []
    ukernels: dict[str, str] = {}
    texts: list[tuple[ir.Operation, Contraction, str]] = []
    for op in walk_ops(module, "linalg.generic"):
        try:
            c = analyze(op)
        except NotAContraction as why:
            log.debug("not a contraction (%s): %s", why, op.location)
            continue
        zero, fill = _zero_before(op, c.output.value)
        if zero:
            c.zero_init = True
            if fill is not None:
                fill.erase()
        uk = f"__slicer_ukernel_{c.element}_{options.mr}x{options.nv}_u{options.unroll}"
        if uk not in ukernels:
            ukernels[uk] = ukernel_text(uk, c.element, options.mr, options.nv, options.unroll)
        name = f"__slicer_contract_{len(texts)}"
        texts.append((op, c, contraction_text(c, options, name, uk, avx512)))
    if not texts:
        return replaced
    generated = ir.Module.parse("\n".join(list(ukernels.values()) + [t for _, _, t in texts]), context)
    for fn in list(generated.body.operations):
        module.body.append(fn.operation)
    for index, (op, c, _) in enumerate(texts):
        name = f"__slicer_contract_{index}"
        with ir.InsertionPoint(op), op.location:
            operands = [o.value for o in c.inputs] + [c.output.value] + list(c.captured)
            func_d.CallOp([], ir.FlatSymbolRefAttr.get(name), operands)
        op.erase()
        replaced.append(f"@{name}: {c.describe()}")
    return replaced
