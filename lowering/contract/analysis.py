"""What a contraction is: the classification of a bufferized `linalg.generic` whose body is `out + f_A * f_B`.

The body's product is split into factors (operands of the `mulf` tree); each factor depends on some
loop dims through the inputs it reads. The factors are assigned to two sides so that the parallel
dims split into M (dims of side A only), N (side B only) and batch (both); K are the reduction dims.
C's innermost (stride-1) dim should be an N dim: the micro-kernel stores vectors along it. Each group
may hold several dims; groups are ordered by C's strides (M, N, batch) and by the B side's strides (K).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import product

from mlir import ir
from mlir.dialects import arith, linalg

from slicer.core.errors import NotAContraction
from slicer.core.linalg_facts import (
    PARALLEL,
    REDUCTION,
    combined_with,
    in_body,
    indexing_maps,
    iterator_kinds,
    projected_dims,
)
from slicer.core.names import DIM_ATTR

from ..body import is_elementwise
from ..memref_facts import MemAccess, static_strides

FLOAT_BYTES = {"f32": 4, "f64": 8, "bf16": 2}
"""The element types of C the generated GEMMs handle, with their sizes (bf16: only with bf16 operands,
`bf16_operands`)."""

_CAPTURABLE = (ir.F32Type, ir.F64Type, ir.F16Type, ir.BF16Type, ir.IntegerType, ir.IndexType)


@dataclass
class Side:
    """The factors of one side of the product and the body ops computing them."""

    factors: list[ir.Value]
    ops: list[ir.Operation]  # body ops in program order, the union of the factors' trees
    inputs: list[int]  # generic input indices read
    dims: set[int]


@dataclass
class Contraction:
    """A generic classified as C[batch, M, N] += A-side[batch, M, K] * B-side[batch, N, K], dims grouped."""

    op: ir.Operation
    ranges: list[int]
    inputs: list[MemAccess]
    output: MemAccess
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
    # What the GEMM does to each whole f32 sum before storing it (epilogue.py), in order: "add" (the next of
    # `addends`, widened to f32), "round" (to bf16 and back to f32); a bf16 C is then rounded as it is stored.
    epilogue: tuple[str, ...] = ()
    addends: tuple[MemAccess, ...] = ()

    def describe(self) -> str:
        letters = "abcdefghijklmnopqrstuvwxyz"

        def names(ds):
            return "".join(letters[d] for d in ds) or "-"

        return (f"batch={names(self.batch)} m={names(self.m)} n={names(self.n)} k={names(self.k)} "
                f"sizes={'x'.join(map(str, self.ranges))} {self.element}{' zero-init' if self.zero_init else ''}")


@dataclass
class _Factor:
    """One factor of the product: its value, the body ops computing it, the inputs it reads, its loop dims."""

    value: ir.Value
    ops: set
    inputs: set
    dims: set


def _operand(value: ir.Value, amap: ir.AffineMap) -> MemAccess:
    if not isinstance(value.type, ir.MemRefType):
        raise NotAContraction("operand is not a memref")
    type_ = ir.MemRefType(value.type)
    if not type_.has_static_shape:
        raise NotAContraction("dynamic shape")
    dims = projected_dims(amap)
    if dims is None:
        raise NotAContraction("indexing map is not a projection of loop dims")
    strides = static_strides(type_)
    if strides is None:
        raise NotAContraction("dynamic strides")
    return MemAccess(value, type_, dims, strides)


def _loop_ranges(operands: list[MemAccess], count: int) -> list[int]:
    ranges: list[int | None] = [None] * count
    for o in operands:
        for d, size in zip(o.dims, o.type.shape):
            if ranges[d] is not None and ranges[d] != size:
                raise NotAContraction("inconsistent loop ranges")
            ranges[d] = size
    if any(r is None for r in ranges):
        raise NotAContraction("a loop dim indexes no operand")
    return [r for r in ranges if r is not None]  # all of them (checked above)


def _product_value(block: ir.Block) -> ir.Value:
    """The `product` of a body `yield out + product`."""
    body_ops = list(block.operations)
    yield_op = body_ops[-1]
    if yield_op.name != linalg.YieldOp.OPERATION_NAME or len(yield_op.operands) != 1:
        raise NotAContraction("body does not yield one value")
    found = combined_with(yield_op.operands[0], block.arguments[len(block.arguments) - 1])
    if found is None or found[0].name != arith.AddFOp.OPERATION_NAME:
        raise NotAContraction("body is not out + product")
    return found[1]


def _factors(product_value: ir.Value, block: ir.Block) -> list[ir.Value]:
    """The leaves of the multiplication tree of `product_value` inside the body."""
    factors: list[ir.Value] = []
    stack = [product_value]
    while stack:
        value = stack.pop()
        owner = None if isinstance(value, ir.BlockArgument) else value.owner
        if owner is not None and in_body(value, block) and owner.name == arith.MulFOp.OPERATION_NAME:
            stack.extend(reversed(list(owner.operands)))
        else:
            factors.append(value)
    return factors


def _factor(value: ir.Value, block: ir.Block, inputs: list[MemAccess], captured: list) -> _Factor:
    """The body ops, inputs and loop dims `value` depends on (values from outside the body go to `captured`)."""
    out_arg = block.arguments[len(block.arguments) - 1]
    ops: set = set()
    used: set = set()
    indexed: set = set()  # loop dims read by `linalg.index` (a padded dim's mask: packing computes them)

    def tree(v: ir.Value) -> None:
        if isinstance(v, ir.BlockArgument) and v.owner == block:
            if v == out_arg:
                raise NotAContraction("a factor reads the accumulator")
            used.add(v.arg_number)
            return
        if not in_body(v, block):
            if v not in captured:
                captured.append(v)
            return
        owner = v.owner
        if owner.name == linalg.IndexOp.OPERATION_NAME:
            ops.add(owner)
            indexed.add(ir.IntegerAttr(owner.attributes[DIM_ATTR]).value)
            return
        if not is_elementwise(owner):
            raise NotAContraction(f"body op {owner.name} is not elementwise arith/math")
        if owner in ops:
            return
        ops.add(owner)
        for operand in owner.operands:
            tree(operand)

    tree(value)
    dims = set(indexed)
    for i in used:
        dims |= set(inputs[i].dims)
    return _Factor(value, ops, used, dims)


def _best_split(info: list[_Factor], variable: list[int], parallel: set, reduction: set, c_inner: int):
    """The assignment of the variable factors to sides A and B: (A factor indices, B's, M dims, N dims, batch dims).

    Every split gives M and N dims; C's innermost dim in N is preferred (direct vector tiles of C),
    then fewer factors on side B (B is packed once per K block, A once per M block).
    """
    best = None
    for assignment in product((0, 1), repeat=len(variable)):
        if assignment[0] == 1:
            continue  # each split once: side A holds the first variable factor
        sides = [[variable[i] for i, s in enumerate(assignment) if s == side] for side in (0, 1)]
        if not sides[1]:
            continue
        da = set().union(*(info[i].dims for i in sides[0]))
        db = set().union(*(info[i].dims for i in sides[1]))
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
    return best[1:]


def _side(info: list[_Factor], indices: list[int], op_index: dict) -> Side:
    ops: set = set()
    used: set = set()
    dims: set = set()
    for i in indices:
        ops |= info[i].ops
        used |= info[i].inputs
        dims |= info[i].dims
    return Side([info[i].value for i in indices], sorted(ops, key=lambda o: op_index[o]), sorted(used), dims)


def _k_order(reduction: set, inputs: list[MemAccess], a_side: Side, b_side: Side) -> list[int]:
    """K dims in the B side's memory order (B packing reads along them), then A's."""
    def k_key(d):
        keys = []
        for i in b_side.inputs + a_side.inputs:
            s = inputs[i].stride_of(d)
            keys.append(-(s if s is not None else 0))
        return (keys, d)

    return sorted(reduction, key=k_key)


def _checked_operands(op: ir.Operation) -> tuple[list[MemAccess], MemAccess, str]:
    n_inputs = len(op.operands) - 1
    if n_inputs < 2 or len(op.results):
        raise NotAContraction("needs >= 2 inputs and one output buffer")
    operands = [_operand(v, m) for v, m in zip(op.operands, indexing_maps(op))]
    element = str(operands[-1].type.element_type)
    if element not in FLOAT_BYTES:
        raise NotAContraction(f"element type {element}")
    return operands[:-1], operands[-1], element


def analyze(op: ir.Operation) -> Contraction:
    """The contraction structure of a bufferized linalg.generic, or NotAContraction(reason)."""
    op = op.operation
    kinds = iterator_kinds(op)
    inputs, output, element = _checked_operands(op)
    ranges = _loop_ranges(inputs + [output], len(kinds))
    parallel = {d for d, k in enumerate(kinds) if k == PARALLEL}
    reduction = {d for d, k in enumerate(kinds) if k == REDUCTION}
    if not reduction or sorted(output.dims) != sorted(parallel) or len(set(output.dims)) != len(output.dims):
        raise NotAContraction("output is not indexed by exactly the parallel dims")
    if not output.dims:  # a dot product to a scalar (a batch of one row): no GEMM, the vectorizer's reduction
        raise NotAContraction("0-d output")

    block = op.regions[0].blocks[0]
    captured: list[ir.Value] = []
    info = [_factor(f, block, inputs, captured) for f in _factors(_product_value(block), block)]
    for c in captured:
        if not isinstance(c.type, _CAPTURABLE):
            raise NotAContraction(f"captured value of type {c.type}")
    variable = [i for i, f in enumerate(info) if f.dims]
    constant = [i for i, f in enumerate(info) if not f.dims]
    if len(variable) < 2 or len(variable) > 8:
        raise NotAContraction("fewer than two factors depend on the loops")

    c_inner = output.dims[int(min(range(len(output.dims)), key=lambda i: output.strides[i]))]
    a_idx, b_idx, m, n, batch = _best_split(info, variable, parallel, reduction, c_inner)
    a_idx = a_idx + constant  # constant factors (e.g. a scale) are applied while packing A
    op_index = {o: i for i, o in enumerate(block.operations)}
    a_side, b_side = _side(info, a_idx, op_index), _side(info, b_idx, op_index)
    contraction = Contraction(op, ranges, inputs, output, element, a_side, b_side, list(batch), list(m), list(n),
                              _k_order(reduction, inputs, a_side, b_side), captured, list(block.arguments), False)
    return with_output(contraction, output, element)


def with_output(c: Contraction, output: MemAccess, element: str) -> Contraction:
    """`c` writing `output` (same loop dims, any layout) of `element`: the M, N and batch groups ordered by its
    strides (outer, largest stride, first; unit dims outermost) and whether its tiles are direct vectors along N."""
    c_stride: dict[int, int] = {}
    for d, s in zip(output.dims, output.strides):  # a loop dim indexing two dims: their strides add (`stride_of`)
        c_stride[d] = c_stride.get(d, 0) + s
    # Outer (largest stride) first; dims of extent 1 outermost: a unit dim ties in stride with the dim inside it
    # and, sorted innermost, took the micro-kernel's register tile (a tile of one row; issue 51's note).
    by_c = lambda ds: sorted(ds, key=lambda d: (c.ranges[d] != 1, -c_stride[d], d))  # noqa: E731
    n_order = by_c(c.n)
    direct = output.dims[-1] == n_order[-1] and output.strides[-1] == 1
    return replace(c, output=output, element=element, batch=by_c(c.batch), m=by_c(c.m), n=n_order, direct_c=direct)


def bf16_operands(c: Contraction) -> tuple[int, int] | None:
    """(A's input, B's input) when each side is one bf16 input read as it is, maybe widened by `arith.extf`
    (a matmul of bf16 tensors into f32 or bf16): the bf16 GEMM packs their bits. None otherwise."""
    if c.element not in ("f32", "bf16"):
        return None
    found = []
    for side in (c.a, c.b):
        if len(side.factors) != 1 or len(side.inputs) != 1:
            return None
        index = side.inputs[0]
        if str(c.inputs[index].type.element_type) != "bf16":
            return None
        widened = (len(side.ops) == 1 and side.ops[0].name == arith.ExtFOp.OPERATION_NAME
                   and str(side.ops[0].results[0].type) == "f32")
        if side.ops and not widened:
            return None
        found.append(index)
    return found[0], found[1]


def reads_bf16(c: Contraction) -> bool:
    """Whether the contraction reads or writes bf16 (it needs the bf16 GEMM, or none)."""
    return c.element == "bf16" or any(str(o.type.element_type) == "bf16" for o in c.inputs)
