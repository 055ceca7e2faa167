"""Builders and typed views of the `slicer` operations.

Builders follow the upstream Python style: keyword-only `loc`/`ip`, and
lowercase helpers return values (`slice_`, `annotate`) while `loop` returns the
op view (its body must still be filled). Views (`MeshOp`, `LoopOp`, `SliceOp`,
`AnnotateOp`) give typed access so passes never read raw attribute dictionaries.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mlir import ir

from slicer.core.errors import DialectError
from slicer.core.mesh import Mesh, block_size
from slicer.core.names import (
    ANNOTATE,
    AXES_ATTR,
    DIM_ATTR,
    GRID,
    LOOP,
    LOOP_ACTION_ATTR,
    LOOP_MESH_ATTR,
    MESH,
    MESH_AXES_ATTR,
    RANGE_PRODUCT,
    SHAPE_ATTR,
    SHARDING_OPERAND_ATTR,
    SLICE,
    SYM_NAME_ATTR,
    YIELD,
)
from slicer.core.operations import as_op, walk_ops

from .attributes import Action, RangeType, Sharding, TileAction, action_of

# ----------------------------------------------------------------------------- mesh


class MeshOp:
    """View of `slicer.mesh`."""

    def __init__(self, op: ir.Operation | ir.OpView):
        self.operation = as_op(op)
        assert self.operation.name == MESH, self.operation.name

    @property
    def sym_name(self) -> str:
        return ir.StringAttr(self.operation.attributes[SYM_NAME_ATTR]).value

    def axes_and_shape(self) -> tuple[tuple[str, ...], tuple[int, ...]]:
        """The raw axis names and sizes; raises DialectError if the attributes have the wrong kinds."""
        attrs = self.operation.attributes
        axes = attrs[MESH_AXES_ATTR]
        if not all(isinstance(a, ir.StringAttr) for a in axes):
            raise DialectError("mesh 'axes' must be a list of strings")
        shape = attrs[SHAPE_ATTR]
        if not isinstance(shape, ir.DenseI64ArrayAttr):
            raise DialectError("mesh 'shape' must be an array<i64: ...>")
        return tuple(ir.StringAttr(a).value for a in axes), tuple(shape)

    def mesh(self) -> Mesh:
        """The mesh as a value; raises DialectError (or slicer.core.MeshError) if it is malformed."""
        axes, shape = self.axes_and_shape()
        if len(axes) != len(shape):
            raise DialectError(f"mesh @{self.sym_name} has {len(axes)} axes but {len(shape)} sizes")
        return Mesh(list(zip(axes, shape)))


def mesh(name: str, axes: Mesh | Mapping[str, int] | Sequence[tuple[str, int]], *, loc=None, ip=None) -> MeshOp:
    """Create `slicer.mesh @name` with the given axes (in order) and sizes."""
    pairs = (list(axes.axes) if isinstance(axes, Mesh)
             else list(axes.items()) if isinstance(axes, Mapping) else list(axes))
    op = ir.Operation.create(
        MESH,
        attributes={
            SYM_NAME_ATTR: ir.StringAttr.get(name),
            MESH_AXES_ATTR: ir.ArrayAttr.get([ir.StringAttr.get(a) for a, _ in pairs]),
            SHAPE_ATTR: ir.DenseI64ArrayAttr.get([int(n) for _, n in pairs]),
        },
        loc=loc,
        ip=ip,
    )
    return MeshOp(op)


def find_meshes(module: ir.Operation | ir.OpView) -> dict[str, MeshOp]:
    """All `slicer.mesh` ops directly in `module`'s body, by symbol name."""
    found: dict[str, MeshOp] = {}
    for op in as_op(module).regions[0].blocks[0].operations:
        if op.operation.name == MESH:
            view = MeshOp(op)
            found.setdefault(view.sym_name, view)
    return found


def grids(module) -> dict[str, tuple[list[str], list[int]]]:
    """Each `shard.grid` directly in `module`'s body that the partitioner made (it names its axes in
    `slicer.axes`: mesh axes, or the sub-axes of a grid that refines the mesh), by symbol -> (axes, sizes)."""
    found = {}
    for op in as_op(module).regions[0].blocks[0].operations:
        op = op.operation
        if op.name == GRID and AXES_ATTR in op.attributes:
            found[ir.StringAttr(op.attributes[SYM_NAME_ATTR]).value] = (
                [ir.StringAttr(a).value for a in ir.ArrayAttr(op.attributes[AXES_ATTR])],
                list(ir.DenseI64ArrayAttr(op.attributes[SHAPE_ATTR])))
    return found


# ----------------------------------------------------------------------------- loop


class LoopOp:
    """View of `slicer.loop`: a builder over one range."""

    def __init__(self, op: ir.Operation | ir.OpView):
        self.operation = as_op(op)
        assert self.operation.name == LOOP, self.operation.name

    @property
    def mesh(self) -> str:
        return ir.FlatSymbolRefAttr(self.operation.attributes[LOOP_MESH_ATTR]).value

    @property
    def action(self) -> Action | None:
        return action_of(self.operation.attributes[LOOP_ACTION_ATTR])

    @property
    def body(self) -> ir.Block:
        return self.operation.regions[0].blocks[0]

    @property
    def range_arg(self) -> ir.BlockArgument:
        return self.body.arguments[0]

    @property
    def range(self) -> RangeType | None:
        return RangeType.of(self.range_arg.type)

    @property
    def terminator(self) -> ir.Operation | None:
        ops = self.body.operations
        return ops[len(ops) - 1].operation if len(ops) else None

    @property
    def yielded(self) -> list[ir.Value]:
        term = self.terminator
        return list(term.operands) if term is not None and term.name == YIELD else []

    @property
    def results(self) -> list[ir.Value]:
        return list(self.operation.results)


def loop(
    result_types: Sequence[ir.Type],
    *,
    mesh: str,
    action: Action,
    range: RangeType,
    loc=None,
    ip=None,
) -> LoopOp:
    """Create an empty `slicer.loop`; fill `.body` (its range is `.range_arg`) and end it with `yield_`."""
    op = ir.Operation.create(
        LOOP,
        results=list(result_types),
        attributes={LOOP_MESH_ATTR: ir.FlatSymbolRefAttr.get(mesh), LOOP_ACTION_ATTR: action.to_attr()},
        regions=1,
        loc=loc,
        ip=ip,
    )
    block_loc = loc if loc is not None else ir.Location.current
    op.regions[0].blocks.append(range.to_type(), arg_locs=[block_loc])
    return LoopOp(op)


def yield_(values: Sequence[ir.Value], *, loc=None, ip=None) -> ir.Operation:
    """End a loop body, yielding one block per loop result."""
    return ir.Operation.create(YIELD, operands=list(values), loc=loc, ip=ip)


def block_type(result_type: ir.RankedTensorType, action: Action, size: int) -> ir.RankedTensorType:
    """The block type a loop body yields for a loop result of `result_type`."""
    if isinstance(action, TileAction):
        return with_dim(result_type, action.dim, block_size(result_type.shape[action.dim], size))
    return result_type


def with_dim(type_: ir.RankedTensorType, dim: int, size: int) -> ir.RankedTensorType:
    """`type_` with dim `dim` set to `size`."""
    shape = list(type_.shape)
    shape[dim] = size
    return ir.RankedTensorType.get(shape, type_.element_type, type_.encoding)


# ----------------------------------------------------------------------------- slice


class SliceOp:
    """View of `slicer.slice`: block `range` of `source` along `dim`."""

    def __init__(self, op: ir.Operation | ir.OpView):
        self.operation = as_op(op)
        assert self.operation.name == SLICE, self.operation.name

    @property
    def source(self) -> ir.Value:
        return self.operation.operands[0]

    @property
    def range_value(self) -> ir.Value:
        return self.operation.operands[1]

    @property
    def range(self) -> RangeType | None:
        return RangeType.of(self.range_value.type)

    @property
    def dim(self) -> int:
        return ir.IntegerAttr(self.operation.attributes[DIM_ATTR]).value

    @property
    def result(self) -> ir.Value:
        return self.operation.results[0]


def slice_(source: ir.Value, range_value: ir.Value, dim: int, *, loc=None, ip=None) -> ir.Value:
    """The block of `source` along `dim` selected by `range_value` (result type inferred)."""
    rng = RangeType.of(range_value.type)
    if rng is None:
        raise DialectError(f"slice_ needs a !slicer.range value, got {range_value.type}")
    src_type = ir.RankedTensorType(source.type)
    result_type = with_dim(src_type, dim, block_size(src_type.shape[dim], rng.size))
    op = ir.Operation.create(
        SLICE,
        results=[result_type],
        operands=[source, range_value],
        attributes={DIM_ATTR: ir.IntegerAttr.get(ir.IntegerType.get_signless(64), dim)},
        loc=loc,
        ip=ip,
    )
    return op.results[0]


# ----------------------------------------------------------------------------- range product


def range_product(major: ir.Value, minor: ir.Value, *, loc=None, ip=None) -> ir.Value:
    """The product range of `major` and `minor` (axes major then minor)."""
    a, b = RangeType.of(major.type), RangeType.of(minor.type)
    if a is None or b is None:
        raise DialectError("range_product needs two !slicer.range values")
    result = RangeType(a.axes + b.axes, a.size * b.size).to_type()
    return ir.Operation.create(RANGE_PRODUCT, results=[result], operands=[major, minor], loc=loc, ip=ip).results[0]


def split_product_slices(root: ir.Operation | ir.OpView | ir.Module) -> None:
    """Rewrite every slice by a `slicer.range_product` into nested slices (major first), the
    equal form lowering and partitioning handle; unused products are erased."""
    for op in walk_ops(root, SLICE):
        view = SliceOp(op)
        owner = view.range_value.owner
        if isinstance(view.range_value, ir.BlockArgument) or as_op(owner).name != RANGE_PRODUCT:
            continue
        product = as_op(owner)
        with ir.InsertionPoint(op), op.location:
            outer = slice_(view.source, product.operands[0], view.dim)
            inner = slice_(outer, product.operands[1], view.dim)
        view.result.replace_all_uses_with(inner)
        op.erase()
        split_product_slices(inner.owner)
        split_product_slices(outer.owner)
    for op in walk_ops(root, RANGE_PRODUCT):
        if all(not list(r.uses) for r in op.results):
            op.erase()


# ----------------------------------------------------------------------------- annotate


class AnnotateOp:
    """View of `slicer.annotate`: `source`, requested with `sharding`."""

    def __init__(self, op: ir.Operation | ir.OpView):
        self.operation = as_op(op)
        assert self.operation.name == ANNOTATE, self.operation.name

    @property
    def source(self) -> ir.Value:
        return self.operation.operands[0]

    @property
    def result(self) -> ir.Value:
        return self.operation.results[0]

    @property
    def sharding(self) -> Sharding | None:
        return Sharding.of(self.operation.attributes[SHARDING_OPERAND_ATTR])


def annotate(value: ir.Value, sharding: Sharding, *, loc=None, ip=None) -> ir.Value:
    """Request that `value` be distributed as `sharding`; returns the annotated value."""
    op = ir.Operation.create(
        ANNOTATE, results=[value.type], operands=[value], attributes={SHARDING_OPERAND_ATTR: sharding.to_attr()},
        loc=loc, ip=ip
    )
    return op.results[0]
