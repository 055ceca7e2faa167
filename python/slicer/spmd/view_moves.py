"""Several reshapes of one value that must move: the value moves once and each reshape is redone on its moved copy.

A `tensor.expand_shape` / `tensor.collapse_shape` (a *view*: the same bytes, another shape) computed in one
tiling and read in another is redistributed where it is read. When its source feeds several views, each view
would move on its own although they hold the same bytes (the experts' backward reads the gradient of their
outputs through two expand_shapes of one value: two all_to_alls). `move_through_view` instead maps the tiling
a use needs back through the views to their source, converts the source (`PartitionState.convert`, cached per
target: the second view reuses the first's moved copy) and redoes the views locally on the moved blocks.

The tiling maps back when each reshape group is tiled on its leading dim only (the first that is not a unit
dim: its blocks are contiguous in the other shape), as propagation's reshape rules tile them
(`rules/explicit.py`); partial sums pass through (a reshape is linear). Padded blocks and values one view reads
alone keep the plain conversion (the same bytes would move, in another shape).
"""

from __future__ import annotations

from dataclasses import replace

from mlir import ir
from mlir.dialects import tensor

from slicer.core.names import DIST_ATTR, REASSOCIATION_ATTR, SLICE
from slicer.core.operations import defining_op
from slicer.redistribution import DistType, subaxes

from .dist_types import dist_text, local_type, tensor_shape

_EXPAND, _COLLAPSE = tensor.ExpandShapeOp.OPERATION_NAME, tensor.CollapseShapeOp.OPERATION_NAME


def move_through_view(p, entry, target: DistType, before: ir.Operation, why: str) -> ir.Value | None:
    """`entry` (a view's result) in `target`'s tiling by moving the views' source once and reshaping its moved
    blocks; None where that does not apply (the caller converts `entry` itself)."""
    chain = []  # (view op, the view's value, its type in the target tiling), from `entry` up to the source
    current, wanted = entry, target
    while (op := _view_op(current)) is not None:
        # the source's blocks, reshaped by the view, are the view's blocks: its type maps back the same way
        source_type = _source_type(op, _source_shape(p, op, current.type), current.type)
        if source_type is None:
            break
        source_wanted = _source_type(op, source_type.shape, wanted)
        if source_wanted is None:
            break
        source = replace(current, local=op.operands[0], type=source_type, logical=None, pads={},
                         origin=f"the source of '{op.name}' {current.origin}")
        if not _known_as(p, source) or p.target(source.shape, source_wanted, before.location) != source_wanted:
            break
        chain.append((op, current, wanted))
        current, wanted = source, source_wanted
    if not chain or _views_of(p, current) < 2:
        return None
    local = p.convert(current, wanted, before, why)
    for op, view, view_type in reversed(chain):
        key = (view.local, view.type, view_type)
        if key not in p.cache:
            p.cache[key] = _redo_view(p, op, local, view_type, before, view.context)
        local = p.cache[key]
    return local


def _view_op(entry) -> ir.Operation | None:
    """The reshape that made `entry`'s local value, when it is one on unpadded blocks."""
    op = defining_op(entry.local)
    if op is None or op.name not in (_EXPAND, _COLLAPSE) or entry.pads or entry.type.shape != entry.shape:
        return None
    return op


def _known_as(p, source) -> bool:
    """Whether no partitioned value holds `source`'s local value in its context with another type."""
    return all(e.type == source.type for e in p.env.values() if e.local == source.local and e.context == source.context)


def _groups(op: ir.Operation) -> list[list[int]]:
    return [[ir.IntegerAttr(d).value for d in g] for g in ir.ArrayAttr(op.attributes[REASSOCIATION_ATTR])]


def _leading(group: list[int], shape: tuple[int, ...]) -> int:
    return next((d for d in group if shape[d] != 1), group[0])


def _source_shape(p, op: ir.Operation, t: DistType) -> tuple[int, ...]:
    """The global shape of `op`'s source, whose local blocks `op` reshapes into `t`'s blocks."""
    local = tensor_shape(op.operands[0]) or ()
    tiled = _source_type(op, local, t)
    dims = tiled.dims if tiled is not None else tuple(() for _ in local)
    return tuple(n * subaxes.group_size(p.mesh, d) for n, d in zip(local, dims, strict=True))


def _source_type(op: ir.Operation, source_shape: tuple[int, ...], t: DistType) -> DistType | None:
    """The source's type whose blocks, reshaped by `op`, are `t`'s blocks; None when `t` tiles a reshape group
    on another dim than its leading one."""
    groups = _groups(op)
    dims: list[tuple[str, ...]] = [() for _ in source_shape]
    for index, group in enumerate(groups):
        if op.name == _EXPAND:  # source dim `index` -> result dims `group`
            lead = _leading(group, t.shape)
            if any(t.dims[d] for d in group if d != lead):
                return None
            dims[index] = t.dims[lead]
        else:  # source dims `group` -> result dim `index`
            dims[_leading(group, source_shape)] = t.dims[index]
    return DistType(source_shape, tuple(dims), t.partial)


def _views_of(p, entry) -> int:
    """How many views read `entry`'s value: in the loop program (directly or through a loop's slice of it)
    where not partitioned yet, its local value where partitioned."""
    readers = [use.owner for use in entry.local.uses]
    for key in [k for k, e in p.env.items() if e.local == entry.local and e.context == entry.context
                and k != entry.local]:
        for use in key.uses:
            user = use.owner
            readers += [u.owner for r in user.results for u in r.uses] if user.name == SLICE else [user]
    return sum(1 for r in readers if r.name in (_EXPAND, _COLLAPSE))


def _redo_view(p, op: ir.Operation, source: ir.Value, t: DistType, before: ir.Operation,
               context: frozenset[str]) -> ir.Value:
    """`op`'s reshape applied to the local blocks `source`, giving `t`'s blocks, emitted before `before`."""
    result = local_type(t, p.mesh, ir.RankedTensorType(source.type).element_type)
    where = ir.Location.name("the view redone on its source's moved blocks", childLoc=op.location)
    with ir.InsertionPoint(before), where:
        if op.name == _EXPAND:
            value = tensor.expand_shape(result, source, _groups(op), [], list(result.shape))
        else:
            value = tensor.collapse_shape(result, source, _groups(op))
    value.owner.attributes[DIST_ATTR] = ir.ArrayAttr.get([ir.StringAttr.get(dist_text(t, context))])
    return value
