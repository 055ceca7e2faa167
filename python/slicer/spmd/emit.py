"""Emit a redistribution plan as explicit collective ops on local tensors.

Each step of a `slicer.redistribution.Plan` maps to one op (docs/redistribution.md):

| plan step | op emitted | why |
| --- | --- | --- |
| all_slice(d, M) | `tensor.extract_slice` at offset `idx(M) * L/K` (from `shard.process_multi_index`) | a local slice: no communication, and the kernels keep it |
| all_gather(d, M) | `shard.all_gather grid_axes = M gather_axis = d` | same semantics |
| all_to_all(s, c, M) | `shard.all_to_all grid_axes = M split_axis = s concat_axis = c` | same semantics |
| all_reduce(M) | `shard.all_reduce grid_axes = M` (reduction sum) | same semantics |
| reduce_scatter(d, M) | `shard.reduce_scatter grid_axes = M scatter_axis = d` | same semantics |
| permute(pairs) | `slicer.permute` (`slicer.dialect.collectives`) | `shard` has no general permutation |

Axis order: `grid_axes` is written in the plan's `mesh_axes` order, major to minor. The `shard` dialect numbers
the members of a group row-major over `grid_axes` *in the order listed* (the first listed axis is the most
significant), which is exactly the redistribution package's group index; upstream accepts unsorted lists. The
in-process simulator executes these ops with the redistribution package's step semantics and compares whole
programs with the unpartitioned original, which checks this correspondence end to end.

Every emitted op carries `slicer.dist` (the type after the step) and the location given by the caller
(provenance: why the collective exists, see `slicer.passes.partition`).
"""

from __future__ import annotations

from typing import Callable, Sequence

from mlir import ir
from mlir.dialects import arith, tensor

from slicer.core.names import ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, DIST_ATTR, REDUCE_SCATTER
from slicer.dialect import permute
from slicer.redistribution import AllGather, AllReduce, AllSlice, AllToAll, Mesh, Permute, Plan, ReduceScatter

from .dist_types import local_type


def _i16_axes(mesh: Mesh, axes: Sequence[str]) -> ir.Attribute:
    return ir.DenseI16ArrayAttr.get([mesh.axis_index(a) for a in axes])


def _index_attr(value: int) -> ir.Attribute:
    return ir.IntegerAttr.get(ir.IndexType.get(), value)


def _collective(name: str, source: ir.Value, result_type: ir.Type, grid: str, attrs: dict, loc) -> ir.Value:
    attributes = {"grid": ir.FlatSymbolRefAttr.get(grid)}
    attributes.update(attrs)
    op = ir.Operation.create(name, results=[result_type], operands=[source], attributes=attributes, loc=loc)
    return op.results[0]


class PlanEmitter:
    """Emits plans at the current insertion point.

    `coords()` returns the device's coordinate on every mesh axis (index values, in mesh axis order); it is
    called only when a local slice needs a block offset.
    """

    def __init__(self, mesh: Mesh, grid: str, coords: Callable[[], list[ir.Value]]):
        self.mesh = mesh
        self.grid = grid
        self.coords = coords

    def group_index(self, axes: Sequence[str]) -> ir.Value:
        """The device's index in its group over `axes` (row-major, first axis major) as an index value."""
        coords = self.coords()
        index_type = ir.IndexType.get()
        result = None
        for axis in axes:
            c = coords[self.mesh.axis_index(axis)]
            if result is None:
                result = c
            else:
                size = arith.constant(index_type, self.mesh.size(axis))
                result = arith.addi(arith.muli(result, size), c)
        return result

    def local_block(self, value: ir.Value, dim: int, axes: Sequence[str], loc) -> ir.Value:
        """This device's block `idx(axes)` of `value` along `dim` (a local `tensor.extract_slice`)."""
        src = ir.RankedTensorType(value.type)
        k = self.mesh.group_size(axes)
        block = src.shape[dim] // k
        shape = list(src.shape)
        shape[dim] = block
        with loc:
            offset = arith.muli(self.group_index(axes), arith.constant(ir.IndexType.get(), block))
            dynamic = ir.ShapedType.get_dynamic_size()
            static_offsets = [dynamic if d == dim else 0 for d in range(src.rank)]
            return tensor.extract_slice(ir.RankedTensorType.get(shape, src.element_type), value, [offset], [], [],
                                        static_offsets, shape, [1] * src.rank)

    def emit(self, value: ir.Value, plan: Plan, loc: Callable[[object], ir.Location]) -> ir.Value:
        """Emit every step of `plan` on `value` (whose local type is the plan's source); returns the result.

        `loc(step)` gives the location of the op emitted for `step`.
        """
        element_type = ir.RankedTensorType(value.type).element_type
        for step in plan.steps:
            after = local_type(step.type_after, self.mesh, element_type)
            where = loc(step)
            if isinstance(step, AllSlice):
                value = self.local_block(value, step.slice_axis, step.mesh_axes, where)
            elif isinstance(step, AllGather):
                value = _collective(ALL_GATHER, value, after, self.grid,
                                    {"grid_axes": _i16_axes(self.mesh, step.mesh_axes),
                                     "gather_axis": _index_attr(step.gather_axis)}, where)
            elif isinstance(step, AllToAll):
                value = _collective(ALL_TO_ALL, value, after, self.grid,
                                    {"grid_axes": _i16_axes(self.mesh, step.mesh_axes),
                                     "split_axis": _index_attr(step.split_axis),
                                     "concat_axis": _index_attr(step.concat_axis)}, where)
            elif isinstance(step, AllReduce):
                value = _collective(ALL_REDUCE, value, after, self.grid,
                                    {"grid_axes": _i16_axes(self.mesh, step.mesh_axes)}, where)
            elif isinstance(step, ReduceScatter):
                value = _collective(REDUCE_SCATTER, value, after, self.grid,
                                    {"grid_axes": _i16_axes(self.mesh, step.mesh_axes),
                                     "scatter_axis": _index_attr(step.scatter_axis)}, where)
            elif isinstance(step, Permute):
                if step.pairs:
                    value = permute(value, self.grid, step.pairs, loc=where)
                else:  # a pure relabelling of size-1 axes: nothing moves
                    continue
            else:  # pragma: no cover - exhaustive over the plan steps
                raise TypeError(f"unknown plan step {step!r}")
            value.owner.attributes[DIST_ATTR] = ir.ArrayAttr.get([ir.StringAttr.get(step.type_after.spec())])
        return value
