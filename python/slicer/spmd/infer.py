"""Infer how an unannotated function argument should arrive: the cheapest distributed type consistent with its uses.

An argument whose every use is a `slicer.slice` along the same dim `d` over the same range axes `A` can arrive
tiled by `A` on `d`: each device then already holds exactly the block its slice selects and the slice costs
nothing. The rule recurses into the slice results (an argument sliced by `x` whose blocks are only sliced again
along dim `e` by `y` arrives `x` on `d` and `y` on `e`), and an argument only used by `slicer.annotate` ops that
all request the same sharding arrives in that sharding. Anything else (a use by a plain op, slices that
disagree) arrives replicated, which is always correct.
"""

from __future__ import annotations

from mlir import ir

from slicer.core.names import ANNOTATE, SLICE
from slicer.dialect import AnnotateOp, SliceOp
from slicer.redistribution import DistType, Mesh, RedistributionError

from .padding import padded_type


def infer_argument(value: ir.Value, mesh: Mesh) -> DistType | None:
    """The inferred type of `value` (a function argument), or None for replicated."""
    t = _infer(value)
    if t is None:
        return None
    try:  # uneven dims as padded blocks (checked on the padded shape; the caller pads it again)
        checked = DistType.of(mesh, padded_type(mesh, t.shape, t).shape, t.dims, ())
    except RedistributionError:
        return None
    return DistType(t.shape, checked.dims, ())


def _infer(value: ir.Value) -> DistType | None:
    users = [use.owner.operation for use in value.uses]
    if not users:
        return None
    shape = tuple(ir.RankedTensorType(value.type).shape)
    if all(u.name == ANNOTATE for u in users):
        shardings = {AnnotateOp(u).sharding for u in users}
        if len(shardings) == 1 and None not in shardings:
            (sharding,) = shardings
            if len(sharding.dims) == len(shape):
                return DistType(shape, sharding.dims, ())
        return None
    if not all(u.name == SLICE and u.operands[0] == value for u in users):
        return None
    views = [SliceOp(u) for u in users]
    keys = {(v.dim, v.range.axes if v.range else None) for v in views}
    if len(keys) != 1:
        return None
    ((dim, axes),) = keys
    if axes is None:
        return None
    inner = {_infer(v.result) for v in views}
    base = tuple(() for _ in shape)
    if len(inner) == 1 and None not in inner:
        (t,) = inner
        used = {a for d in t.dims for a in d}
        if not used & set(axes):
            base = t.dims
    dims = tuple(tuple(axes) + base[i] if i == dim else base[i] for i in range(len(shape)))
    return DistType(shape, dims, ())
