"""Uneven shapes in the SPMD program: padded blocks (docs/partition.md, "Uneven shapes").

A dim of logical size n tiled over k devices (one mesh axis) has blocks of c = ceil(n/k), torch.chunk's
block: device r holds rows [r*c, min(n, (r+1)*c)) padded at its tail to c. Globally that is the logical
value followed by k*c - n rows of padding, so every distributed type keeps dividing its (padded) shape and
the redistribution package, the collectives and the kernels see one uniform SPMD program. What this module
adds to the partitioner:

- `padded_type`: the distributed type of a value of logical shape `logical` under given dims (each uneven
  dim rounded up to k*c; an uneven dim tiled over more than one axis is refused);
- `trim` / `pad_with_zeros`: the local ops at the edges where the padded size changes (after a gather, before
  a scatter: `partitioner.convert`);
- `Pad` and `PadTracker`: inside loop bodies, which dims of a block carry padding (from the slices that cut
  them unevenly) and how it flows through linalg ops by their indexing maps;
- `mask_reduction`: an op reducing over a padded dim ignores the padding: a generic's body keeps its
  accumulator for invalid rows (`select(valid, new, acc)`), a named contraction has both operands zeroed
  there (a select, so garbage * 0 cannot make a NaN). The valid count of a device is
  clamp(n - idx*c, 0, c) from its mesh coordinate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from mlir import ir
from mlir.dialects import arith, linalg, tensor

from slicer.core.errors import RedistributionError, Unsupported
from slicer.core.linalg_facts import (
    PARALLEL,
    REDUCTION,
    combined_with,
    has_operand_segments,
    indexing_maps,
    input_count,
    is_linalg_op,
    iterator_kinds,
    loop_dim,
    reshape_kept_dims,
)
from slicer.core.mesh import block_size
from slicer.core.names import DIST_ATTR
from slicer.core.operations import defining_op
from slicer.redistribution import DistType, Mesh, subaxes

from .dist_types import dist_text


def padded_type(mesh: Mesh, logical: tuple[int, ...], t: DistType) -> DistType:
    """`t` on the padded shape of a value of logical shape `logical`: each dim rounded up to a multiple of
    its tile count. Raises `RedistributionError` for an uneven dim tiled over more than one axis."""
    shape = []
    for d, (n, axes) in enumerate(zip(logical, t.dims)):
        k = subaxes.group_size(mesh, axes)
        if n % k and len(axes) != 1:
            raise RedistributionError(
                f"dim {d} of size {n} is tiled over [{','.join(axes)}] ({k} blocks), which does not divide it; "
                f"a dim that does not divide is cut into padded blocks over one mesh axis only: tile dim {d} over "
                "one axis or make its size a multiple of the tile count")
        shape.append(block_size(n, k) * k)
    return DistType(tuple(shape), t.dims, t.partial)


def is_padded(t: DistType, logical: tuple[int, ...]) -> bool:
    return tuple(t.shape) != tuple(logical)


# -- local pad and trim -------------------------------------------------------------------------------------


def trim(value: ir.Value, dim: int, size: int) -> ir.Value:
    """The first `size` rows of `value` along `dim` (a local `tensor.extract_slice`)."""
    src = ir.RankedTensorType(value.type)
    shape = list(src.shape)
    shape[dim] = size
    return tensor.extract_slice(ir.RankedTensorType.get(shape, src.element_type), value, [], [], [],
                                [0] * src.rank, shape, [1] * src.rank)


def pad_with_zeros(value: ir.Value, dim: int, size: int) -> list[ir.Value]:
    """`value` followed by zeros along `dim` up to `size` rows; returns the ops' results, the last the value
    (a zero-filled tensor with `value` inserted at offset 0: fills and inserts stay in the kernels)."""
    src = ir.RankedTensorType(value.type)
    shape = list(src.shape)
    shape[dim] = size
    element = src.element_type
    empty = tensor.empty(shape, element)
    zero = arith.constant(element, _zero_attr(element))
    filled = linalg.fill(zero, outs=[empty])
    out = tensor.insert_slice(value, filled, [], [], [], [0] * src.rank, list(src.shape), [1] * src.rank)
    return [empty, filled, out]


def resize(value: ir.Value, dim: int, size: int) -> list[ir.Value]:
    """`value` trimmed or padded with zeros along `dim` to `size` rows (the ops' results, the last the value);
    a `tensor.empty` (no content to keep) is made again at the new size."""
    owner = defining_op(value)
    src = ir.RankedTensorType(value.type)
    if owner is not None and owner.name == tensor.EmptyOp.OPERATION_NAME and not owner.operands:
        return [tensor.empty([size if d == dim else n for d, n in enumerate(src.shape)], src.element_type)]
    return [trim(value, dim, size)] if size < src.shape[dim] else pad_with_zeros(value, dim, size)


def _zero_attr(element: ir.Type) -> ir.Attribute:
    if isinstance(element, ir.IntegerType):
        return ir.IntegerAttr.get(element, 0)
    return ir.FloatAttr.get(element, 0.0)


# -- padded dims inside loop bodies -------------------------------------------------------------------------


@dataclass(frozen=True)
class Pad:
    """A dim of a block that carries padding: the logical size `size` of the dim the slice cut over `axes`
    into blocks of `block` rows (the device's valid rows: clamp(size - idx(axes)*block, 0, block))."""

    size: int
    block: int
    axes: tuple[str, ...]

    def describe(self) -> str:
        k = -(-self.size // self.block)
        return f"size {self.size} cut over [{','.join(self.axes)}] into blocks of {self.block} ({k} blocks)"


def pads_through(op: ir.Operation, operand_pads: dict[int, dict[int, Pad]],
                 group_index: Callable[[tuple[str, ...]], ir.Value],
                 mark: Callable[[ir.Operation], None]) -> list[dict[int, Pad]]:
    """The padded dims of each result of `op` whose operands hold padded blocks (`operand_pads`: operand
    index -> dim -> Pad), masking the op where it reduces over them; `group_index(axes)` gives the device's
    block index, `mark(op)` types the tensor ops emitted before `op`."""
    kept = reshape_kept_dims(op)
    if kept is not None and all(d in kept for pads in operand_pads.values() for d in pads):
        return [{kept[d]: pad for d, pad in operand_pads[0].items()}]  # the dims it leaves alone keep their rows
    if not is_linalg_op(op):
        index, pads = next(iter(operand_pads.items()))
        dim, pad = next(iter(pads.items()))
        raise Unsupported(f"operand #{index} holds padded blocks on dim {dim} ({pad.describe()}); only linalg "
                           "ops compute on padded blocks (a reshape or slice would mix padding into real rows): make "
                           "the size divisible by the tile count or do not tile this dim")
    loops = loop_pads(op, operand_pads)
    reduced = reduced_pads(op, loops)
    if reduced:
        mask_reduction(op, reduced, lambda pad: valid_count(pad, group_index), mark)
    return result_pads(op, loops)


def loop_pads(op: ir.Operation, operand_pads: dict[int, dict[int, Pad]]) -> dict[int, Pad]:
    """The op's loop dims that walk padded dims of its operands (linalg ops only; the maps must name the
    loop dim plainly on a padded dim)."""
    maps = indexing_maps(op)
    found: dict[int, Pad] = {}
    for index, pads in operand_pads.items():
        for dim, pad in pads.items():
            loop = loop_dim(maps[index].results[dim])
            if loop is None:
                raise Unsupported(f"operand #{index} is indexed by {maps[index].results[dim]} on its padded dim "
                                   f"{dim} ({pad.describe()}); only plain loop dims may walk padded blocks")
            if found.get(loop, pad) != pad:
                raise Unsupported(f"loop dim {loop} walks two differently padded dims ({found[loop].describe()}; "
                                   f"{pad.describe()})")
            found[loop] = pad
    return found


def result_pads(op: ir.Operation, loops: dict[int, Pad]) -> list[dict[int, Pad]]:
    """For each result, its dims that carry padding (those its map names by a padded parallel loop dim)."""
    maps, kinds, n_in = indexing_maps(op), _kinds(op), _inputs(op)
    out = []
    for r in range(len(op.results)):
        pads = {}
        for dim, expr in enumerate(maps[n_in + r].results):
            loop = loop_dim(expr)
            if loop is not None and loop in loops and kinds[loop] == PARALLEL:
                pads[dim] = loops[loop]
        out.append(pads)
    return out


def _inputs(op: ir.Operation) -> int:
    """How many operands are inputs (`linalg.reduce` has no operand segments: one init per result)."""
    return input_count(op) if has_operand_segments(op) else len(op.operands) - len(op.results)


def _kinds(op: ir.Operation) -> list[str]:
    """Each loop dim's iterator kind; a named op has none written: a dim no output map names is a reduction."""
    kinds = iterator_kinds(op)
    if kinds:
        return kinds
    maps, n_in = indexing_maps(op), _inputs(op)
    named = {loop_dim(e) for m in maps[n_in:] for e in m.results}
    return [PARALLEL if d in named else REDUCTION for d in range(maps[0].n_dims)]


def reduced_pads(op: ir.Operation, loops: dict[int, Pad]) -> dict[int, Pad]:
    kinds = _kinds(op)
    return {loop: pad for loop, pad in loops.items() if kinds[loop] != PARALLEL}


def valid_count(pad: Pad, group_index: Callable[[tuple[str, ...]], ir.Value]) -> ir.Value:
    """clamp(size - idx(axes)*block, 0, block) as an index value (this device's valid rows)."""
    index = ir.IndexType.get()
    start = arith.muli(group_index(pad.axes), arith.constant(index, pad.block))
    rest = arith.subi(arith.constant(index, pad.size), start)
    rest = arith.maxsi(rest, arith.constant(index, 0))
    return arith.minsi(rest, arith.constant(index, pad.block))


def _all_valid(loops: dict[int, ir.Value]) -> ir.Value:
    cond = None
    for loop, valid in sorted(loops.items()):
        ok = arith.cmpi(arith.CmpIPredicate.ult, linalg.IndexOp(loop).result, valid)
        cond = ok if cond is None else arith.andi(cond, ok)
    return cond


def mask_reduction(op: ir.Operation, reduced: dict[int, Pad], valid_of: Callable[[Pad], ir.Value],
                   dist_attr: Callable[[ir.Operation], None]) -> None:
    """Make `op` ignore the padding of the loop dims it reduces over (`reduced`); the valid counts are
    emitted before `op` by `valid_of`, and every op emitted outside `op` gets its `slicer.dist` through
    `dist_attr`."""
    with ir.InsertionPoint(op):
        valid = {loop: valid_of(pad) for loop, pad in reduced.items()}
    block = op.regions[0].blocks[0] if op.regions and op.regions[0].blocks else None
    n_in = _inputs(op)
    contraction = block is not None and _is_contraction(block, n_in)
    if op.name in (linalg.GenericOp.OPERATION_NAME, linalg.ReduceOp.OPERATION_NAME) and not (
            contraction and _products_of_inputs(op, block, n_in, valid)):
        _mask_body(op, valid)  # bodies they print
        return
    # A contraction (named, or a generic `acc + a * b` of its inputs' elements) keeps its body, so the kernels
    # still run it as a packed GEMM (a select in the body is no `out + product`): its operands are zeroed in
    # the padding instead, which makes every term there zero.
    if not contraction:
        raise Unsupported(f"'{op.name}' reduces over a padded dim and is neither a linalg.generic nor a "
                           "contraction; write it as a linalg.generic or make the dim divisible")
    maps = indexing_maps(op)
    for index in range(n_in):
        dims = {d: valid[loop_dim(e)] for d, e in enumerate(maps[index].results) if loop_dim(e) in valid}
        if dims:
            with ir.InsertionPoint(op), op.location:
                masked = _zero_outside(op.operands[index], dims)
            dist_attr(masked.owner)
            dist_attr(masked.owner.operands[-1].owner)  # its tensor.empty
            op.operands[index] = masked


def _mask_body(op: ir.Operation, valid: dict[int, ir.Value]) -> None:
    """yield select(valid, new, acc) per output: invalid iterations leave the accumulator as it is."""
    block = op.regions[0].blocks[0]
    n_in = _inputs(op)
    terminator = list(block.operations)[-1]
    with ir.InsertionPoint(terminator), op.location:
        cond = _all_valid(valid)
        for j, value in enumerate(list(terminator.operands)):
            terminator.operands[j] = arith.select(cond, value, block.arguments[n_in + j])


def _products_of_inputs(op: ir.Operation, block: ir.Block, n_in: int, valid: dict[int, ir.Value]) -> bool:
    """Whether a contraction's product (`_is_contraction`) multiplies its inputs' elements only (each factor
    a block argument, maybe widened or rounded: zero stays zero), each loop of `valid` indexing one of them:
    zeroing those inputs in the padding then zeroes every term there."""
    term = combined_with(list(block.operations)[-1].operands[0], block.arguments[n_in])[1]
    factors, stack = [], [term]
    while stack:
        value = stack.pop()
        owner = None if isinstance(value, ir.BlockArgument) else value.owner
        if owner is not None and owner.name in (arith.MulFOp.OPERATION_NAME, arith.MulIOp.OPERATION_NAME):
            stack.extend(owner.operands)
            continue
        while owner is not None and owner.name in (arith.ExtFOp.OPERATION_NAME, arith.TruncFOp.OPERATION_NAME):
            value = owner.operands[0]
            owner = None if isinstance(value, ir.BlockArgument) else value.owner
        if not isinstance(value, ir.BlockArgument) or value.owner != block or value.arg_number >= n_in:
            return False
        factors.append(value.arg_number)
    maps = indexing_maps(op)
    return all(any(loop in {loop_dim(e) for e in maps[i].results} for i in factors) for loop in valid)


def _is_contraction(block: ir.Block, n_in: int) -> bool:
    """Is the body `acc + a * b` (an addition of a product into the accumulator)?"""
    yielded = list(block.operations)[-1].operands
    if len(yielded) != 1:
        return False
    found = combined_with(yielded[0], block.arguments[n_in])
    if found is None or found[0].name not in (arith.AddFOp.OPERATION_NAME, arith.AddIOp.OPERATION_NAME):
        return False
    term = found[1]
    return not isinstance(term, ir.BlockArgument) and term.owner.name in (arith.MulFOp.OPERATION_NAME,
                                                                          arith.MulIOp.OPERATION_NAME)


def _zero_outside(value: ir.Value, dims: dict[int, ir.Value]) -> ir.Value:
    """`value` with every element whose index on a dim of `dims` is at or past that dim's valid count set to
    zero (an elementwise linalg.generic)."""
    t = ir.RankedTensorType(value.type)
    identity = ir.AffineMapAttr.get(ir.AffineMap.get_identity(t.rank))
    parallel = ir.Attribute.parse("#linalg.iterator_type<parallel>")
    empty = tensor.empty(list(t.shape), t.element_type)
    generic = linalg.GenericOp([t], [value], [empty], ir.ArrayAttr.get([identity, identity]),
                               ir.ArrayAttr.get([parallel] * t.rank))
    body = generic.regions[0].blocks.append(t.element_type, t.element_type)
    with ir.InsertionPoint(body):
        cond = _all_valid(dims)
        zero = arith.constant(t.element_type, _zero_attr(t.element_type))
        linalg.YieldOp([arith.select(cond, body.arguments[0], zero)])
    return generic.results[0]


def repad(partitioner, entry, target: DistType, before: ir.Operation, why: str):
    """For `partitioner` (a `conversion.PartitionState`) converting `entry` (its `PartitionedValue`): where the
    padded sizes of `entry`'s type and `target` differ (a dim tiled unevenly on one side only, or over different
    counts), those dims gathered whole, trimmed to their logical size and padded with zeros to the target's
    size, locally; the plan to `target` then starts from the result (returned as an entry)."""
    changed = [d for d, (a, b) in enumerate(zip(entry.type.shape, target.shape)) if a != b]
    kept = tuple(() if d in changed else a for d, a in enumerate(entry.type.dims))
    whole = partitioner.canon(DistType(entry.type.shape, kept, entry.type.partial), before.location)
    local = entry.local if whole == entry.type else partitioner.emit_plan(
        entry, whole, before, f"{why} (dims {', '.join(map(str, changed))} change their padded size: "
                              "gathered whole, trimmed and padded again)")
    shape = list(whole.shape)
    for d in changed:
        for size in (entry.shape[d], target.shape[d]):
            if size == shape[d]:
                continue
            shape[d] = size
            with ir.InsertionPoint(before), ir.Location.name(f"padding of dim {d} to {size}",
                                                             childLoc=before.location):
                made = resize(local, d, size)
            text = dist_text(DistType(tuple(shape), whole.dims, whole.partial), entry.context)
            for value in made:
                value.owner.attributes[DIST_ATTR] = ir.ArrayAttr.get([ir.StringAttr.get(text)])
            local = made[-1]
    t = DistType(tuple(shape), whole.dims, whole.partial)
    return replace(entry, local=local, type=t)
