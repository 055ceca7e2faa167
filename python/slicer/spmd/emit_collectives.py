"""Emit a redistribution plan as explicit collective ops on local tensors.

Each step of a `slicer.redistribution.Plan` maps to one op (docs/redistribution.md):

| plan step | op emitted | why |
| --- | --- | --- |
| all_slice(d, M) | `tensor.extract_slice` at offset `idx(M) * L/K` (from `shard.process_multi_index`) | a local slice:
no communication, and the kernels keep it | | all_gather(d, M) | `shard.all_gather grid_axes = M gather_axis = d` | same
semantics | | all_to_all(s, c, M) | `shard.all_to_all grid_axes = M split_axis = s concat_axis = c` | same semantics |
| all_to_all(s, c, M, split order S) | `slicer.all_to_all grid_axes = M split_grid_axes = S ...` | `shard` numbers both
sides the same way | | all_reduce(M) | `shard.all_reduce grid_axes = M` (reduction sum, or max when the step says) |
same semantics | | reduce_scatter(d, M) | `shard.reduce_scatter grid_axes = M scatter_axis = d` | same semantics |
| permute(pairs) | `slicer.permute` (`slicer.dialect.collectives`) | `shard` has no general permutation |

Details: docs/module-notes.md, `spmd/emit_collectives.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from mlir import ir
from mlir.dialects import arith, builtin, shard, tensor

from slicer.core.errors import RedistributionError
from slicer.core.names import AXES_ATTR, DIST_ATTR, GRID, GRID_ATTR, MESH, REFINES_ATTR
from slicer.redistribution import AllSlice, Mesh, Plan, subaxes

from .dist_types import local_type


def _i16(indices: Sequence[int]) -> ir.Attribute:
    return ir.DenseI16ArrayAttr.get(list(indices))


def _index_attr(value: int) -> ir.Attribute:
    return ir.IntegerAttr.get(ir.IndexType.get(), value)


def _collective(name: str, source: ir.Value, result_type: ir.Type, grid: str, attrs: dict, loc) -> ir.Value:
    attributes = {GRID_ATTR: ir.FlatSymbolRefAttr.get(grid)}
    attributes.update(attrs)
    op = ir.Operation.create(name, results=[result_type], operands=[source], attributes=attributes, loc=loc)
    return op.results[0]


def _plan_tokens(plan: Plan) -> set[str]:
    """Every axis or sub-axis a plan's steps and types name."""
    out = set()
    for t in plan.trace.types:
        out |= t.used_axes()
    for step in plan.steps:
        out |= step.named_axes()
    return out


#: step class -> how a step of it is emitted, for kinds not emitted as their op (`PlanEmitter.emit_op`):
#: ``emission(emitter, value, step, plan, result_type, loc) -> value``.
EMISSIONS: dict[type, Callable] = {}


def emits(step_class: type):
    """Decorator: the function emits the steps of ``step_class`` (an entry of ``EMISSIONS``)."""
    def register(emission: Callable) -> Callable:
        EMISSIONS[step_class] = emission
        return emission
    return register


@emits(AllSlice)
def _local_slice(emitter: PlanEmitter, value: ir.Value, step, plan: Plan, after: ir.Type, loc) -> ir.Value:
    """A local slice: no communication, and the kernels keep it."""
    return emitter.local_block(value, step.slice_dim, step.mesh_axes, loc)


class PlanEmitter:
    """Emits plans at the current insertion point.

    `coords()` returns the device's coordinate on every mesh axis (index values, in mesh axis order); it is
    called only when a local slice needs a block offset.
    """

    def __init__(self, mesh: Mesh, grid: str, coords: Callable[[], list[ir.Value]]):
        self.mesh = mesh
        self.grid = grid
        self.coords = coords

    # -- grids ----------------------------------------------------------------------------------------------
    def grid_axes(self, plan: Plan, *groups: Sequence[str]) -> tuple[str, list[list[int]]]:
        """(grid symbol, the indices of each of ``groups`` on it): the mesh's grid when the groups use whole
        axes only, else the grid of the plan's parts (see the module docstring), emitted if needed."""
        if not any(subaxes.is_sub_axis(a) for g in groups for a in g):
            return self.grid, [[self.mesh.axis_index(a) for a in g] for g in groups]
        refinement = subaxes.Refinement(self.mesh, subaxes.splits_at(
            self.mesh, subaxes.boundaries(self.mesh, _plan_tokens(plan))))
        fine = refinement.fine
        symbol = self.grid + "_" + "_".join(f"{a}{'x'.join(map(str, parts))}"
                                            for a, parts in sorted(refinement.splits.items()))
        self._ensure_grid(symbol, [refinement.part_token[a] for a in fine.axis_names], list(fine.shape))
        return symbol, [[fine.axis_index(a) for a in refinement.down_axes(g)] for g in groups]

    def _ensure_grid(self, symbol: str, axes: list[str], shape: list[int]) -> None:
        """Emit `shard.grid @symbol` after the mesh's grid (or its `slicer.mesh`, which slicer-partition turns
        into the grid once every function is partitioned), unless the module has it already."""
        op = ir.InsertionPoint.current.block.owner
        while op is not None and op.name != builtin.ModuleOp.OPERATION_NAME:
            op = op.parent
        if op is None:
            raise RedistributionError(f"PlanEmitter: no module around the insertion point to hold the grid @{symbol}")
        body = op.regions[0].blocks[0]
        anchor = None
        for candidate in body.operations:
            candidate = candidate.operation
            if candidate.name not in (GRID, MESH):
                continue
            name = ir.SymbolTable.get_symbol_name(candidate).value
            if name == symbol:
                return
            if name == self.grid:
                anchor = candidate
        if anchor is None:
            raise RedistributionError(f"PlanEmitter: the module has no shard.grid @{self.grid}; emit plans in the "
                                      "module that defines the mesh's grid")
        grid = shard.GridOp(symbol, ir.DenseI64ArrayAttr.get(shape), loc=anchor.location,
                            ip=ir.InsertionPoint.after(anchor)).operation
        grid.attributes[AXES_ATTR] = ir.ArrayAttr.get([ir.StringAttr.get(a) for a in axes])
        grid.attributes[REFINES_ATTR] = ir.FlatSymbolRefAttr.get(self.grid)

    # -- local blocks ---------------------------------------------------------------------------------------
    def coordinate(self, axis: str) -> ir.Value:
        """The device's coordinate along the axis or sub-axis ``axis`` (index value)."""
        name, _, k, stride = subaxes.extent(self.mesh, axis)
        c = self.coords()[self.mesh.axis_index(name)]
        index_type = ir.IndexType.get()
        if stride > 1:
            c = arith.divui(c, arith.constant(index_type, stride))
        if k * stride < self.mesh.size(name):
            c = arith.remui(c, arith.constant(index_type, k))
        return c

    def group_index(self, axes: Sequence[str]) -> ir.Value:
        """The device's index in its group over `axes` (row-major, first axis major) as an index value."""
        index_type = ir.IndexType.get()
        result = None
        for axis in axes:
            c = self.coordinate(axis)
            if result is None:
                result = c
            else:
                size = arith.constant(index_type, subaxes.size(self.mesh, axis))
                result = arith.addi(arith.muli(result, size), c)
        return result

    def local_block(self, value: ir.Value, dim: int, axes: Sequence[str], loc) -> ir.Value:
        """This device's block `idx(axes)` of `value` along `dim` (a local `tensor.extract_slice`)."""
        src = ir.RankedTensorType(value.type)
        k = subaxes.group_size(self.mesh, axes)
        block = src.shape[dim] // k
        shape = list(src.shape)
        shape[dim] = block
        with loc:
            offset = arith.muli(self.group_index(axes), arith.constant(ir.IndexType.get(), block))
            dynamic = ir.ShapedType.get_dynamic_size()
            static_offsets = [dynamic if d == dim else 0 for d in range(src.rank)]
            return tensor.extract_slice(ir.RankedTensorType.get(shape, src.element_type), value, [offset], [], [],
                                        static_offsets, shape, [1] * src.rank)

    # -- plans ----------------------------------------------------------------------------------------------
    def emit_op(self, value: ir.Value, step, plan: Plan, after: ir.Type, loc) -> ir.Value:
        """`step` as its op (`Collective.ir_op_name`) with the attributes its class writes."""
        groups = step.ir_groups()
        grid, indices = self.grid_axes(plan, *groups.values())
        attrs = {key: _i16(ix) for key, ix in zip(groups, indices)}
        attrs.update({key: _index_attr(dim) for key, dim in step.ir_dims().items()})
        attrs.update({key: ir.DenseI64ArrayAttr.get(ints) for key, ints in step.ir_ints().items()})
        attrs.update({key: ir.Attribute.parse(f"#shard<partial {how}>") for key, how in step.ir_reductions().items()})
        return _collective(step.ir_op_name(), value, after, grid, attrs, loc)

    def emit_step(self, value: ir.Value, step, after: ir.Type, loc: ir.Location) -> ir.Value:
        """`step`, a collective that names no axes (a permute), as its op outside any plan: a rotation of a
        value's blocks (`spmd/permuted_blocks.py`) changes the value, not its distributed type."""
        if step.ir_groups():
            raise RedistributionError(f"PlanEmitter.emit_step: {step.op} names axes; emit it in a plan")
        attrs = {key: ir.DenseI64ArrayAttr.get(ints) for key, ints in step.ir_ints().items()}
        return _collective(step.ir_op_name(), value, after, self.grid, attrs, loc)

    def emit(self, value: ir.Value, plan: Plan, loc: Callable[[object], ir.Location]) -> ir.Value:
        """Emit every step of `plan` on `value` (whose local type is the plan's source); returns the result.

        `loc(step)` gives the location of the op emitted for `step`.
        """
        element_type = ir.RankedTensorType(value.type).element_type
        for step in plan.steps:
            after = local_type(step.type_after, self.mesh, element_type)
            if step.moves_nothing():  # (a permute of size-1 axes only)
                continue
            emission = EMISSIONS.get(type(step), PlanEmitter.emit_op)
            value = emission(self, value, step, plan, after, loc(step))
            value.owner.attributes[DIST_ATTR] = ir.ArrayAttr.get([ir.StringAttr.get(step.type_after.text())])
        return value
