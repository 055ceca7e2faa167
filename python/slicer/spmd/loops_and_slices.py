"""The typing rules of the `slicer` ops the partitioner removes: slices, loops and annotations.

A slice of a value over a loop's range converts the value to the type with those axes as the dim's major tiles
and gives the rest (nothing is computed); a loop's body is inlined, its results typed from what it yields; an
annotation converts its source to the requested sharding. The rules as a whole: docs/partition.md.
"""

from __future__ import annotations

from collections.abc import Callable

from mlir import ir

from slicer.core.names import CONFLICT_ATTR, DIST_ATTR, RULE_ATTR, TACTIC_ATTR, YIELD
from slicer.dialect import AnnotateOp, LoopOp, SliceOp, SumAction, TileAction
from slicer.redistribution import DistType, subaxes

from .conversion import PartitionedValue, PartitionState
from .dist_types import dist_text, tensor_shape, with_major, without_axes
from .emit_collectives import PlanEmitter
from .padding import Pad


def partition_slice(p: PartitionState, op: ir.Operation, context: frozenset[str]) -> None:
    view = SliceOp(op)
    axes = p.ranges.get(view.range_value)
    if axes is None:
        raise p.fail(op, "'slicer.slice' range is not the argument of an enclosing slicer.loop; the "
                     "partitioner binds ranges only to enclosing loops")
    entry = p.lookup(view.source)
    if entry is None:
        raise p.fail(op, f"'slicer.slice' source of type {view.source.type} is not a static tensor value "
                     "defined in this function")
    dim = view.dim
    if set(axes) & entry.context:
        _slice_own_member(p, op, view, entry, axes, context)
        return
    if dim in entry.pads:
        raise p.fail(op, f"'slicer.slice' over [{','.join(axes)}] cuts dim {dim}, which already holds padded "
                     f"blocks ({entry.pads[dim].describe()}); an uneven dim is cut over one axis only")
    new_axes = (context - entry.context)
    wanted = with_major(without_axes(entry.type, new_axes), dim, axes)
    if not p.valid(entry, wanted):
        # Keeping the source's own tiles of dim `dim` as minor tiles under `axes` does not divide the
        # dim (another tactic tiled it over other axes): the slice needs dim `dim` over `axes` alone.
        wanted = DistType(wanted.shape, tuple(tuple(axes) if i == dim else d for i, d in enumerate(wanted.dims)),
                          wanted.partial)
    wanted = p.target(entry.shape, wanted, op.location)
    local = p.convert(entry, wanted, op,
                      f"'slicer.slice' of dim {dim} over [{','.join(axes)}] needs the source tiled major by "
                      f"[{','.join(axes)}] on dim {dim}")
    result_shape = tensor_shape(view.result)
    rest = tuple(wanted.dims[dim][len(axes):])
    dims = tuple(rest if i == dim else d for i, d in enumerate(wanted.dims))
    t = p.target(result_shape, DistType(result_shape, dims, wanted.partial), op.location)  # other dims
    pads = dict(entry.pads)
    if wanted.shape[dim] != entry.shape[dim]:  # padded blocks: the device's tail rows are padding
        pads[dim] = Pad(entry.shape[dim], result_shape[dim], tuple(axes))
    p.env[view.result] = PartitionedValue(local, t, context, f"slice of {entry.origin}", op.location, result_shape,
                                          pads, entry.tactic)
    p.erase.append(op)


def _slice_own_member(p: PartitionState, op: ir.Operation, view: SliceOp, entry: PartitionedValue,
                      axes: tuple[str, ...], context: frozenset[str]) -> None:
    """`slice(v, d, r)` where `v` is itself computed inside the loop over `r`'s axes: device `r` takes block
    `r` of its own member `v(r)`, a purely local slice (no plan: a plan over those axes would mix members)."""
    if not set(axes) <= entry.context:
        raise p.fail(op, f"'slicer.slice' over [{','.join(axes)}] of a value computed inside loops over only "
                     "some of these axes is not supported; slice by one loop's range at a time")
    dim = view.dim
    if entry.shape[dim] % subaxes.group_size(p.mesh, axes) or dim in entry.pads:
        raise p.fail(op, f"'slicer.slice' over [{','.join(axes)}] of a value computed inside that loop cuts "
                     f"dim {dim} of size {entry.shape[dim]} unevenly; padded blocks are cut from values "
                     "defined outside the loop: make the size divisible or slice the loop's input")
    whole = without_axes(entry.type, context - entry.context)
    whole = DistType(whole.shape, tuple(() if i == dim else d for i, d in enumerate(whole.dims)), whole.partial)
    local = p.convert(entry, whole, op, f"'slicer.slice' of dim {dim} takes a block of the whole dim")
    emitter = PlanEmitter(p.mesh, p.grid, p.coords)
    with ir.InsertionPoint(op):
        where = ir.Location.name(f"local block of dim {dim} over [{','.join(axes)}]", childLoc=op.location)
        local = emitter.local_block(local, dim, axes, where)
    t = p.canon(DistType(tensor_shape(view.result), whole.dims, whole.partial), op.location)
    local.owner.attributes[DIST_ATTR] = ir.ArrayAttr.get([ir.StringAttr.get(dist_text(t, context))])
    p.env[view.result] = PartitionedValue(local, t, context, f"slice of {entry.origin}", op.location,
                                          tactic=entry.tactic)
    p.erase.append(op)



def partition_loop(p: PartitionState, op: ir.Operation, context: frozenset[str],
                   process_block: Callable[[ir.Block, frozenset[str]], None]) -> None:
    """A `tile<d>` loop's results get the yielded type with its axes prepended (major) on dim d, a `sum` loop's
    are partial over them; the body (partitioned by `process_block`) is inlined before the loop."""
    loop = LoopOp(op)
    if loop.mesh != p.grid:
        raise p.fail(op, f"'slicer.loop' is over mesh @{loop.mesh} but the function is partitioned over "
                     f"@{p.grid}; use one mesh per module or pick it with slicer-partition{{mesh=...}}")
    rng, action = loop.range, loop.action
    if rng is None or action is None:
        raise p.fail(op, "malformed 'slicer.loop' (run slicer-verify for details)")
    axes = tuple(rng.axes)
    clash = [a for a in axes if a in context]
    if clash:
        raise p.fail(op, f"'slicer.loop' over [{','.join(axes)}] is nested in a loop over the same mesh axis "
                     f"'{clash[0]}'; a device has one coordinate per axis, so each axis can be looped "
                     "over once per nest")
    body_context = context | frozenset(axes)
    p.ranges[loop.range_arg] = axes
    process_block(loop.body, body_context)
    terminator = loop.terminator
    if terminator is None or terminator.name != YIELD:
        raise p.fail(op, f"'slicer.loop' body must end in '{YIELD}'")
    kind = f"{action} loop over [{','.join(axes)}]"
    for index, (value, result) in enumerate(zip(list(terminator.operands), loop.results, strict=False)):
        entry = p.lookup(value)
        if entry is None:
            raise p.fail(op, f"'slicer.loop' result #{index} is not a static tensor")
        inner = without_axes(entry.type, body_context - entry.context)
        local = p.convert(entry, inner, terminator, f"yield #{index} of the {kind}")
        shape = tensor_shape(result)
        pads = dict(entry.pads)
        if isinstance(action, TileAction):
            dims = tuple(axes + inner.dims[action.dim] if i == action.dim else d for i, d in enumerate(inner.dims))
            t = DistType(shape, dims, inner.partial)
            pad = pads.pop(action.dim, None)
            if pad is not None and (pad.axes != axes or pad.size != shape[action.dim]):
                raise p.fail(op, f"'slicer.loop' result #{index} assembles over [{','.join(axes)}] padded "
                             f"blocks of another cut ({pad.describe()}); tile it over one axis only")
        else:
            t = DistType(shape, inner.dims, inner.partial + axes)
        t = p.target(shape, t, op.location)
        if t.local_shape(p.mesh) != inner.local_shape(p.mesh):
            raise p.fail(op, f"'slicer.loop' result #{index} of type {result.type} is tiled as {t}, whose "
                         f"blocks are {t.local_shape(p.mesh)}, but the body yields {inner} blocks of "
                         f"{inner.local_shape(p.mesh)}: an uneven dim is cut into padded blocks over "
                         "one axis at a time (tile it over one axis)")
        origin = ("partial sums of the " if isinstance(action, SumAction) else "result of the ") + kind
        origin += _provenance(op) + f" yielding {entry.origin}"
        tactic = ir.StringAttr(op.attributes[TACTIC_ATTR]).value if TACTIC_ATTR in op.attributes else entry.tactic
        p.env[result] = PartitionedValue(local, t, context, origin, ir.Location.fused([op.location, entry.loc]),
                                         shape, pads, tactic)
    body_ops = [o.operation for o in loop.body.operations]
    for body_op in body_ops[:-1]:
        body_op.move_before(op)
    terminator.erase()  # its operands stay used by nothing; the loop results are rewritten by their users
    del p.ranges[loop.range_arg]
    p.erase.append(op)


def partition_annotate(p: PartitionState, op: ir.Operation, context: frozenset[str]) -> None:
    view = AnnotateOp(op)
    entry = p.lookup(view.source)
    sharding = view.sharding
    if entry is None or sharding is None:
        raise p.fail(op, "'slicer.annotate' needs a static tensor source and a #slicer.sharding")
    p.check_mesh(sharding, "'slicer.annotate'", op)
    used = [a for a in sharding.used_axes() if a in context]
    if used:
        raise p.fail(op, f"'slicer.annotate' inside a loop over '{used[0]}' requests a sharding over that axis; "
                     "inside the loop the value is one block per index: annotate outside the loop")
    target = p.target(entry.shape, DistType(entry.type.shape, sharding.dims, ()), op.location)
    local = p.convert(entry, target, op, f"'slicer.annotate' requests {sharding}")
    p.env[view.result] = PartitionedValue(local, target, context, f"annotated {entry.origin}", op.location,
                                          entry.logical, entry.pads, entry.tactic)
    p.erase.append(op)


def _provenance(loop: ir.Operation) -> str:
    """The tactic/rule that created a loop, when slicer-apply-tactics or slicer-propagate recorded them."""
    notes = []
    for attr, label in ((TACTIC_ATTR, "tactic"), (RULE_ATTR, "rule"), (CONFLICT_ATTR, "conflict")):
        if attr in loop.attributes:
            value = loop.attributes[attr]
            notes.append(f"{label} {ir.StringAttr(value).value if isinstance(value, ir.StringAttr) else value}")
    return f" ({'; '.join(notes)})" if notes else ""
