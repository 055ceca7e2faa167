"""Convolutions as packed GEMMs: a bufferized contraction whose input is read through `oh * s + kh` (a
convolution, its input gradient, its weight gradient) rewritten into a plain contraction the packed GEMM
generator (`slicer-kernel-contract`) takes.

torch-mlir lowers `conv2d` and both of its gradients to `linalg.generic`s of the contraction form `out + a * b`
whose input map has sums of loop dims (`(n, f, oh, ow, c, kh, kw) -> (n, c, oh * 2 + kh, ow * 2 + kw)`): not a
projection, so the GEMM analysis rejects them and they ran as tiled scalar-ish loops (far slower than
torch).
The rewrite, per such op, on buffers, is a patch copy and a plain contraction (its steps: docs/module-notes.md,
`lowering/contract/im2col.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Any

from mlir import ir
from mlir.dialects import arith, linalg, memref, scf
from mlir.dialects import func as func_d

from slicer.core.errors import NotAContraction
from slicer.core.linalg_facts import PARALLEL, REDUCTION, indexing_maps, iterator_kinds
from slicer.core.names import INDEXING_MAPS_ATTR, ITERATOR_TYPES_ATTR

from ..emitter import GeneratedFunctions
from ..memref_facts import byte_width, static_strides
from .analysis import _product_value
from .patch_copy import patch_copy_text
from .zero_init import zero_before

TILE_LANES = 32
"""A register tile's width in f32 lanes (2 vectors of 16): C runs narrower than this waste most of a tile."""
PATCH_BYTES = 2 << 20
"""A patch larger than this (about L2) is built and consumed in chunks of one loop dim (step 4)."""

_FLOATS = (ir.BF16Type, ir.F16Type, ir.F32Type, ir.F64Type)
"""Element types the rewrite moves (the patch keeps its input's type, C its own: bf16 operands with f32
accumulation stay as they are); whether the contraction then becomes a GEMM is `analysis.analyze`'s to say."""

Linear = dict[int, int]  # loop dim -> coefficient of one indexing expression (constants are refused)


def _linear(expr: ir.AffineExpr) -> Linear:
    """`expr` as {dim: coefficient}; NotAContraction for constants, symbols, floordiv/mod."""
    if isinstance(expr, ir.AffineDimExpr):
        return {expr.position: 1}
    if isinstance(expr, ir.AffineAddExpr):
        left, right = _linear(expr.lhs), _linear(expr.rhs)
        return {d: left.get(d, 0) + right.get(d, 0) for d in set(left) | set(right)}
    if isinstance(expr, ir.AffineMulExpr):
        for dims, const in ((expr.lhs, expr.rhs), (expr.rhs, expr.lhs)):
            if isinstance(const, ir.AffineConstantExpr) and const.value > 0:
                return {d: c * const.value for d, c in _linear(dims).items()}
    raise NotAContraction(f"indexing expression {expr} is not a positive linear sum of loop dims")


@dataclass
class _Operand:
    value: ir.Value
    type: ir.MemRefType
    exprs: list[Linear]  # one per memref dim
    strides: tuple[int, ...]

    @property
    def plain(self) -> list[int] | None:
        """The loop dim of each memref dim when every expression is one dim with coefficient 1."""
        dims = self.plain_dims()
        return dims if len(dims) == len(self.exprs) else None

    @property
    def order(self) -> list[int]:
        """`plain` of an operand the rewrite has checked is read plainly (C, the other side)."""
        dims = self.plain
        if dims is None:
            raise NotAContraction("an operand other than the patch's input is read through sums of loop dims")
        return dims

    def plain_dims(self) -> list[int]:
        """The loop dims read plainly (one dim, coefficient 1) by some memref dim, in memref order."""
        return [next(iter(e)) for e in self.exprs if len(e) == 1 and next(iter(e.values())) == 1]

    @property
    def dims(self) -> set[int]:
        return {d for e in self.exprs for d in e}


class _Others:
    """The inputs read through projections, as one side: the dims any of them reads, the memory order of the
    one that reads the most (the weight, or the gradient a fused normalization backward computes from)."""

    def __init__(self, inputs: list[_Operand]):
        self.dims = set().union(*(o.dims for o in inputs))
        self.plain = max(inputs, key=lambda o: len(o.exprs)).order
        self.exprs = [e for o in inputs for e in o.exprs]


def _operands(op: ir.Operation) -> list[_Operand]:
    result = []
    for value, amap in zip(op.operands, indexing_maps(op)):
        if not isinstance(value.type, ir.MemRefType):
            raise NotAContraction("operand is not a memref")
        type_ = ir.MemRefType(value.type)
        strides = static_strides(type_)
        if not type_.has_static_shape or strides is None:
            raise NotAContraction("dynamic shape or strides")
        result.append(_Operand(value, type_, [_linear(e) for e in amap.results], strides))
    return result


def _ranges(operands: list[_Operand], count: int) -> list[int]:
    ranges: dict[int, int] = {}
    for o in operands:
        for e, size in zip(o.exprs, o.type.shape):
            if len(e) == 1 and next(iter(e.values())) == 1:
                ranges.setdefault(next(iter(e)), size)
    if len(ranges) != count:
        raise NotAContraction("a loop dim is read only through sums")
    return [ranges[d] for d in range(count)]


def _memref_type(shape: list[int], element: ir.Type, strides: list[int] | None = None,
                 offset: int = 0) -> ir.MemRefType:
    text = "x".join(map(str, shape)) + f"x{element}"
    row_major = [prod(shape[i + 1:]) for i in range(len(shape))]
    dynamic = offset == ir.ShapedType.get_dynamic_stride_or_offset()
    if strides is not None and (list(strides) != row_major or offset):
        text += f", strided<[{', '.join(map(str, strides))}], offset: {'?' if dynamic else offset}>"
    return ir.Type.parse(f"memref<{text}>")


def _map(count: int, exprs: list[Linear]) -> ir.AffineMap:
    results = []
    for e in exprs:
        terms = [ir.AffineExpr.get_dim(d) * c if c != 1 else ir.AffineExpr.get_dim(d) for d, c in sorted(e.items())]
        total = terms[0]
        for t in terms[1:]:
            total = total + t
        results.append(total)
    return ir.AffineMap.get(count, 0, results)


def _copy(source: ir.Value, source_exprs: list[Linear], target: ir.Value, dims: list[int]) -> None:
    """target[dims...] = source[source_exprs(dims)]: a generic over `dims` (renumbered in order), all parallel."""
    renumber = {d: i for i, d in enumerate(dims)}
    in_map = _map(len(dims), [{renumber[d]: c for d, c in e.items()} for e in source_exprs])
    out_map = _map(len(dims), [{i: 1} for i in range(len(dims))])
    parallel = ir.Attribute.parse("#linalg.iterator_type<parallel>")
    element = ir.MemRefType(source.type).element_type
    generic = linalg.GenericOp([], [source], [target],
                               ir.ArrayAttr.get([ir.AffineMapAttr.get(in_map), ir.AffineMapAttr.get(out_map)]),
                               ir.ArrayAttr.get([parallel] * len(dims)))
    block = generic.regions[0].blocks.append(element, element)
    with ir.InsertionPoint(block):
        linalg.YieldOp([block.arguments[0]])


def _strides(value: ir.Value) -> tuple[int, ...]:
    """The static strides of a buffer the rewrite made or checked (`_operands` refuses dynamic ones)."""
    strides = static_strides(ir.MemRefType(value.type))
    if strides is None:
        raise NotAContraction("dynamic strides")
    return strides


def _bytes(element: ir.Type) -> int:
    """Bytes of one element of a type in `_FLOATS` (checked before)."""
    width = byte_width(element)
    if width is None:
        raise NotAContraction(f"element type {element}")
    return width


def _alloc(shape: list[int], element: ir.Type) -> ir.Value:
    return memref.AllocOp(_memref_type(shape, element), [], [],
                          alignment=ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 64)).result


def _run(output: _Operand, ranges: list[int]) -> list[int]:
    """C's innermost run: its trailing dims while each is contiguous with the next (stride = inner extent)."""
    dims = output.order
    run = [dims[-1]] if output.strides[-1] == 1 else []
    for i in range(len(dims) - 2, -1, -1):
        if not run or output.strides[i] != output.strides[i + 1] * ranges[dims[i + 1]]:
            break
        run.insert(0, dims[i])
    return run


def _check_body(op: ir.Operation) -> None:
    block = op.regions[0].blocks[0]
    if any(o.name == linalg.IndexOp.OPERATION_NAME for o in block.operations):
        raise NotAContraction("body reads linalg.index")
    _product_value(block)  # NotAContraction unless the body is out + product


def _output_order(output: _Operand, patch: _Operand, other: _Others, ranges: list[int]) -> list[int]:
    """The loop dims of C's buffer, outer to inner: C's own, or with the side that is not C's innermost run
    moved innermost when that run is narrower than a register tile and the other side is wider (see step 2)."""
    dims = output.order
    for side, rest in ((patch, other), (other, patch)):
        run: list = []  # C's innermost run of dims read by this side only
        for d in reversed(_run(output, ranges)):
            if d not in side.dims or d in rest.dims:
                break
            run.insert(0, d)
        if run:
            wide = [d for d in dims if d in rest.dims and d not in side.dims]
            if (
                wide
                and prod(ranges[d] for d in run) < TILE_LANES
                and prod(ranges[d] for d in wide) > prod(ranges[d] for d in run)
            ):
                return [d for d in dims if d not in wide] + wide
    return dims


def _patch_order(patch: _Operand, other: _Others, c_order: list[int], kinds: list[str], ranges: list[int]) -> list[int]:
    """The patch buffer's loop dims: batch dims (read by both sides), then the reduction dims in the other
    input's memory order and the patch side's own parallel dims in C's order, the group holding the widest dim
    of the input's innermost expression last, so the copy reads and writes long contiguous rows (step 1)."""
    other_dims = other.plain
    batch = [d for d in c_order if d in patch.dims and d in other.dims]
    reduction = [d for d in other_dims if kinds[d] == REDUCTION and d in patch.dims]
    reduction += sorted(d for d in patch.dims if kinds[d] == REDUCTION and d not in reduction)
    own = [d for d in c_order if d in patch.dims and d not in batch]
    inner = max(patch.exprs[-1], key=lambda d: (ranges[d], d))  # ow of `ow * s + kw`: the copy's long rows
    return batch + (own + reduction if inner in reduction else reduction + own)


def _groups(operands: list[tuple[list[int], tuple[int, ...]]], ranges: list[int], kinds: list[str]) -> list[list[int]]:
    """Chains of loop dims contiguous in every operand that reads them (step 3), in loop dim order."""
    follows: dict[int, int] = {}
    for a in range(len(ranges)):
        candidates = None
        for dims, strides in operands:
            if a not in dims:
                continue
            i = dims.index(a)
            nxt = dims[i + 1] if i + 1 < len(dims) and strides[i] == strides[i + 1] * ranges[dims[i + 1]] else None
            candidates = nxt if candidates is None or candidates == nxt else -1
        if candidates is not None and candidates >= 0 and kinds[candidates] == kinds[a]:
            b = candidates
            if all((a in dims) == (b in dims) for dims, _ in operands):
                follows[a] = b
    heads = [d for d in range(len(ranges)) if d not in follows.values()]
    groups = []
    for head in heads:
        chain = [head]
        while chain[-1] in follows:
            chain.append(follows[chain[-1]])
        groups.append(chain)
    return groups


def _collapse(value: ir.Value, dims: list[int], groups: list[list[int]]) -> tuple[ir.Value, list[int]]:
    """`value` (indexed by loop `dims`) with each group's memref dims collapsed; its new loop dims (group indices)."""
    type_ = ir.MemRefType(value.type)
    group_of = {d: g for g, chain in enumerate(groups) for d in chain}
    reassociation, new_dims = list[Any](), []
    for i, d in enumerate(dims):
        if reassociation and group_of[dims[i - 1]] == group_of[d]:
            reassociation[-1].append(i)
        else:
            reassociation.append([i])
            new_dims.append(group_of[d])
    if len(reassociation) == len(dims):
        return value, new_dims
    strides, offset = _strides(value), type_.get_strides_and_offset()[1]
    shape = [prod(type_.shape[i] for i in group) for group in reassociation]
    result = _memref_type(shape, type_.element_type, [strides[group[-1]] for group in reassociation], offset)
    attr = ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(ir.IntegerType.get_signless(64), i) for i in g])
                             for g in reassociation])
    return memref.collapse_shape(result, value, attr), new_dims


def rewrite(op: ir.Operation, functions: GeneratedFunctions | None = None) -> bool:
    """Rewrite one bufferized convolution-form contraction in place (module docstring); False if `op` reads
    every operand through projections (the GEMM analysis takes it as it is). NotAContraction otherwise.
    With `functions`, the patch copy is a call to a generated vector copy (`patch_copy.py`) whose text
    `functions` collects for the caller to add to the module; without, a `linalg.generic`."""
    kinds = iterator_kinds(op)
    operands = _operands(op)
    if all(o.plain is not None for o in operands):
        return False
    inputs, output = operands[:-1], operands[-1]
    if len(op.results) or len(inputs) < 2 or output.plain is None or len(set(output.plain)) != len(output.plain):
        raise NotAContraction("needs two or more inputs and an output buffer indexed by loop dims")
    if not all(isinstance(o.type.element_type, _FLOATS) for o in operands):
        raise NotAContraction(f"element type {output.type.element_type}")
    _check_body(op)
    ranges = _ranges(operands, len(kinds))
    sums = [i for i, o in enumerate(inputs) if o.plain is None]
    if len(sums) != 1:
        raise NotAContraction("more than one input is read through sums of loop dims")
    at = sums[0]  # the patch's input; the others (the other side, and what fusion put next to it) are plain

    def split(operands: list[_Operand]) -> tuple[_Operand, _Others, _Operand]:
        return operands[at], _Others([o for i, o in enumerate(operands[:-1]) if i != at]), operands[-1]

    _relayout_output(op, *split(operands), ranges)
    operands = _operands(op)
    chunk = _chunk_dim(*split(operands), ranges, kinds)
    if chunk is not None:
        op = _chunked(op, operands, *chunk)
        operands = _operands(op)
        ranges = _ranges(operands, len(kinds))
    patch, other, output = split(operands)
    with op.location, ir.InsertionPoint(op):
        p_order = _patch_order(patch, other, output.order, kinds, ranges)
        patch_buffer = _alloc([ranges[d] for d in p_order], patch.type.element_type)
        if functions is None:
            _copy(patch.value, patch.exprs, patch_buffer, p_order)
        else:
            element = patch.type.element_type
            text = patch_copy_text(GeneratedFunctions.SELF, str(patch.type), str(patch_buffer.type), str(element),
                                   _bytes(element), patch.exprs, p_order, ranges)
            func_d.CallOp([], ir.FlatSymbolRefAttr.get(functions.name_of(text)), [patch.value, patch_buffer])
    new_operands = [(o.value, o.order, o.strides) if i != at else (patch_buffer, p_order, _strides(patch_buffer))
                    for i, o in enumerate(operands)]
    groups = _groups([(dims, strides) for _, dims, strides in new_operands], ranges, kinds)
    maps = []
    with op.location, ir.InsertionPoint(op):
        for i, (value, dims, _) in enumerate(new_operands):
            collapsed, new_dims = _collapse(value, dims, groups)
            op.operands[i] = collapsed
            maps.append(ir.AffineMapAttr.get(_map(len(groups), [{d: 1} for d in new_dims])))
    op.attributes[INDEXING_MAPS_ATTR] = ir.ArrayAttr.get(maps)
    op.attributes[ITERATOR_TYPES_ATTR] = ir.ArrayAttr.get(
        [
            ir.Attribute.parse(f"#linalg.iterator_type<{'parallel' if kinds[g[0]] == PARALLEL else 'reduction'}>")
            for g in groups
        ]
    )
    return True


def _relayout_output(op: ir.Operation, patch: _Operand, other: _Others, output: _Operand, ranges: list[int]) -> None:
    """Step 2: C computed into a buffer with the wide side innermost (copied in before, or zero-filled when C
    starts at zero, and copied out after) when `_output_order` asks for it; before any chunking, so the copies
    run once."""
    c_order = _output_order(output, patch, other, ranges)
    if c_order == output.order:
        return
    element = output.type.element_type
    zero, fill = zero_before(op, output.value)
    with op.location, ir.InsertionPoint(op):
        c_buffer = _alloc([ranges[d] for d in c_order], element)
        if zero:  # C starts at zero (a fill before the op): so does the buffer, without reading C
            linalg.fill(arith.constant(element, 0.0), outs=[c_buffer])
            if fill is not None:  # nothing reads C in between, and the copy out writes all of it
                fill.erase()
        else:
            _copy(output.value, [{d: 1} for d in output.order], c_buffer, c_order)
    with op.location, ir.InsertionPoint.after(op):
        _copy(c_buffer, [{d: 1} for d in c_order], output.value, output.order)
    count = len(ranges)
    op.operands[len(op.operands) - 1] = c_buffer
    maps = list(ir.ArrayAttr(op.attributes[INDEXING_MAPS_ATTR]))[:-1]
    op.attributes[INDEXING_MAPS_ATTR] = ir.ArrayAttr.get(
        maps + [ir.AffineMapAttr.get(_map(count, [{d: 1} for d in c_order]))]
    )


def _chunk_dim(patch: _Operand, other: _Others, output: _Operand, ranges: list[int],
               kinds: list[str]) -> tuple[int, int] | None:
    """(loop dim, chunk) to build the patch in pieces of about `PATCH_BYTES` (step 4), or None: the dim read
    plainly by the patch (and plainly by every operand that reads it) whose chunks leave the GEMM's smallest
    side (M, N or K) largest."""
    element = _bytes(patch.type.element_type)
    total = prod(ranges[d] for d in patch.dims) * element
    if total <= PATCH_BYTES:
        return None
    best: tuple[int, int, int] | None = None
    for d in patch.plain_dims():
        if ranges[d] == 1 or any(d in e and e != {d: 1} for o in (patch, other, output) for e in o.exprs):
            continue
        chunk = max(1, ranges[d] * PATCH_BYTES // total)
        while ranges[d] % chunk:
            chunk -= 1
        sides = [prod(ranges[e] for e in patch.dims if e not in other.dims and kinds[e] == PARALLEL),
                 prod(ranges[e] for e in other.dims if e not in patch.dims and kinds[e] == PARALLEL),
                 prod(ranges[e] for e in range(len(ranges)) if kinds[e] == REDUCTION)]
        group = 0 if d not in other.dims else 1 if kinds[d] == PARALLEL else 2
        sides[group] = sides[group] // ranges[d] * chunk
        if best is None or min(sides) > best[0]:
            best = (min(sides), d, chunk)
    return None if best is None or best[2] == ranges[best[1]] else (best[1], best[2])


def _chunked(op: ir.Operation, operands: list[_Operand], dim: int, chunk: int) -> ir.Operation:
    """`op` moved into an `scf.for` over `dim` in steps of `chunk`, every operand that reads it a subview there."""
    index = ir.IndexType.get()
    with op.location, ir.InsertionPoint(op):
        bounds = [arith.constant(index, v) for v in (0, _size(operands, dim), chunk)]
        loop = scf.ForOp(*bounds)
    with op.location, ir.InsertionPoint(loop.body):
        views = {}
        for i, o in enumerate(operands):
            if dim not in o.dims:
                continue
            position = next(j for j, e in enumerate(o.exprs) if e == {dim: 1})
            offsets = [loop.induction_variable if j == position else 0 for j in range(len(o.exprs))]
            sizes = [chunk if j == position else size for j, size in enumerate(o.type.shape)]
            offset = ir.ShapedType.get_dynamic_stride_or_offset()
            layout = ir.StridedLayoutAttr.get(offset, list(o.strides))
            result = ir.MemRefType.get(sizes, o.type.element_type, layout)
            views[i] = memref.subview(o.value, offsets, sizes, [1] * len(sizes), result_type=result)
        inner = op.clone()
        for i, view in views.items():
            inner.operands[i] = view
        scf.YieldOp([])
    op.erase()
    return inner


def _size(operands: list[_Operand], dim: int) -> int:
    return next(size for o in operands for e, size in zip(o.exprs, o.type.shape) if e == {dim: 1})
