"""Semantic verifier of the `slicer` dialect: what IRDL cannot express.

Checks, each reported at the offending op's location:
- meshes: axis names unique, sizes positive, one size per axis (a repeated
  mesh name is a symbol redefinition, reported by MLIR itself);
- loops: known mesh, a `#slicer.tile<d>`/`#slicer.sum` action, one range block
  argument over existing axes with the right size, no axis already used by an
  enclosing loop, a `tosa.yield` of one block per result with the block type the
  action implies;
- slices: range over existing axes, dim in bounds, dim divisible by the range
  size, result type = source type with that dim divided;
- shardings (on `slicer.annotate` and function arguments/results): known mesh,
  one axis list per dim, known axes, no axis twice, dims divisible.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import builtin, func

from slicer.core.errors import DialectError, MeshError
from slicer.core.mesh import Mesh, block_size
from slicer.core.names import (
    ANNOTATE,
    ARG_ATTRS_ATTR,
    FUNCTION_TYPE_ATTR,
    LOOP,
    LOOP_ACTION_ATTR,
    MESH,
    RANGE_PRODUCT,
    RES_ATTRS_ATTR,
    SHARDING_ATTR,
    SHARDING_OPERAND_ATTR,
    SLICE,
    YIELD,
)

from .attributes import RangeType, Sharding, TileAction
from .ops import AnnotateOp, LoopOp, MeshOp, SliceOp, walk_ops


@dataclass(frozen=True)
class Diagnostic:
    """One verifier error: where and what."""

    location: ir.Location
    message: str


def verify(module: ir.Operation | ir.OpView | ir.Module) -> list[Diagnostic]:
    """All semantic errors in `module` (empty when it is valid)."""
    return _Verifier(module).run()


class _Verifier:
    def __init__(self, module):
        self.module = module.operation
        self.errors: list[Diagnostic] = []
        self.meshes: dict[str, Mesh] = {}  # declared meshes by symbol name

    def error(self, op: ir.Operation, message: str) -> None:
        self.errors.append(Diagnostic(op.location, message))

    def run(self) -> list[Diagnostic]:
        for op in walk_ops(self.module, MESH):
            self.check_mesh(op)
        for op in walk_ops(self.module):
            if op.name == LOOP:
                self.check_loop(op)
            elif op.name == SLICE:
                self.check_slice(op)
            elif op.name == ANNOTATE:
                self.check_annotate(op)
            elif op.name == RANGE_PRODUCT:
                self.check_range_product(op)
            elif op.name == func.FuncOp.OPERATION_NAME:
                self.check_function_shardings(op)
        return self.errors

    # -- meshes ------------------------------------------------------------------------

    def check_mesh(self, op: ir.Operation) -> None:
        view = MeshOp(op)
        name = view.sym_name
        try:
            axes, shape = view.axes_and_shape()
        except DialectError as exc:
            return self.error(op, f"'slicer.mesh' {exc}")
        if len(axes) != len(shape):
            return self.error(op, f"mesh @{name} has {len(axes)} axes but {len(shape)} sizes")
        if not axes:
            return self.error(op, f"mesh @{name} has no axes")
        for axis, size in zip(axes, shape):
            if not axis:
                return self.error(op, f"mesh @{name} has an empty axis name")
            if axes.count(axis) > 1:
                return self.error(op, f"mesh @{name} declares axis '{axis}' twice")
            if size < 1:
                return self.error(op, f"mesh @{name} axis '{axis}' has size {size}; sizes must be >= 1")
        try:
            mesh = view.mesh()
        except MeshError as exc:
            return self.error(op, f"mesh @{name}: {exc}")
        # A second mesh of the same name is a symbol redefinition, which MLIR reports.
        self.meshes.setdefault(name, mesh)

    def mesh_named(self, op: ir.Operation, name: str) -> str | None:
        """`name` if it is a declared mesh, else None (and an error)."""
        if name not in self.meshes:
            known = ", ".join("@" + m for m in self.meshes) or "none"
            self.error(op, f"unknown mesh @{name} (declared meshes: {known})")
            return None
        return name

    def check_axes(self, op: ir.Operation, mesh_name: str, axes, what: str, where: str = "") -> bool:
        """Every axis exists in the mesh and appears once; `where` prefixes the message."""
        mesh = self.meshes[mesh_name]
        for axis in axes:
            if not mesh.has_axis(axis):
                self.error(op, f"{where}unknown mesh axis '{axis}' in {what} (mesh @{mesh_name} has axes "
                               f"{', '.join(mesh.axis_names)})")
                return False
        for axis in axes:
            if list(axes).count(axis) > 1:
                self.error(op, f"{where}mesh axis '{axis}' is used twice in {what}")
                return False
        return True

    # -- loops -------------------------------------------------------------------------

    def check_loop(self, op: ir.Operation) -> None:
        loop = LoopOp(op)
        attrs = op.attributes  # IRDL guarantees a symbol `mesh` and an `action`
        mesh = self.mesh_named(op, loop.mesh)
        if mesh is None:
            return
        action = loop.action
        if action is None:
            return self.error(op, "'slicer.loop' action must be #slicer.tile<dim> or #slicer.sum, got "
                                  f"{attrs[LOOP_ACTION_ATTR]}")
        region = op.regions[0]
        blocks = list(region.blocks)
        if len(blocks) != 1 or len(blocks[0].arguments) != 1:
            return self.error(op, "'slicer.loop' body must be one block with one !slicer.range argument")
        rng = loop.range
        if rng is None:
            return self.error(op, "'slicer.loop' block argument must be a well-formed "
                                  "!slicer.range<\"axis\", size>, got "
                                  f"{loop.range_arg.type}")
        if not self.check_range(op, mesh, rng):
            return
        for axis in rng.axes:
            outer = _enclosing_loop_using(op, axis)
            if outer is not None:
                return self.error(op, f"mesh axis '{axis}' is already used by an enclosing loop; a value cannot be "
                                      "partitioned twice over one axis")
        term = loop.terminator
        if term is None or term.name != YIELD:
            return self.error(op, f"'slicer.loop' body must end in '{YIELD}' (the loop's yield)")
        yielded = loop.yielded
        results = loop.results
        if len(yielded) != len(results):
            return self.error(op, f"'slicer.loop' has {len(results)} results but its body yields {len(yielded)} values")
        for index, (res, blk) in enumerate(zip(results, yielded)):
            if not (isinstance(res.type, ir.RankedTensorType) and isinstance(blk.type, ir.RankedTensorType)):
                return self.error(op, f"'slicer.loop' result #{index} and its yielded block must be ranked tensors")
            self.check_loop_result(op, index, ir.RankedTensorType(res.type), ir.RankedTensorType(blk.type), action, rng)

    def check_loop_result(self, op, index, result: ir.RankedTensorType, block: ir.RankedTensorType, action,
                          rng) -> None:
        want = list(result.shape)
        if isinstance(action, TileAction):
            if not 0 <= action.dim < result.rank:
                return self.error(op,
                                  f"'slicer.loop' tiles dim {action.dim} but result #{index} has rank {result.rank}")
            want[action.dim] = block_size(want[action.dim], rng.size)  # padded blocks when uneven
        if list(block.shape) != want or block.element_type != result.element_type:
            self.error(
                op,
                f"'slicer.loop' ({action} over {rng}) result #{index} has type {result}, so the body must yield "
                f"blocks of shape {'x'.join(map(str, want))}x{result.element_type}, but it yields {block}",
            )

    def check_range(self, op: ir.Operation, mesh_name: str, rng: RangeType) -> bool:
        if not self.check_axes(op, mesh_name, rng.axes, f"!slicer.range<{', '.join(rng.axes)}>"):
            return False
        size = self.meshes[mesh_name].group_size(rng.axes)
        if rng.size != size:
            self.error(op, f"range over {', '.join(rng.axes)} has size {rng.size}, but mesh @{mesh_name} gives {size}")
            return False
        return True

    # -- slices ------------------------------------------------------------------------

    def check_slice(self, op: ir.Operation) -> None:
        view = SliceOp(op)  # IRDL guarantees ranked tensors and a !slicer.range operand
        rng = view.range
        if rng is None:
            return self.error(op, f"'slicer.slice' range {view.range_value.type} is malformed: expected "
                                  "!slicer.range<\"axis\", size> or !slicer.range<[\"axis\", ...], size>")
        mesh = self.mesh_of_range(op, view.range_value)
        if mesh is None or not self.check_range(op, mesh, rng):
            return
        src, res = ir.RankedTensorType(view.source.type), ir.RankedTensorType(view.result.type)
        dim = view.dim
        if not 0 <= dim < src.rank:
            return self.error(op, f"'slicer.slice' dim {dim} does not exist in {src} (rank {src.rank})")
        expected = list(src.shape)
        expected[dim] = block_size(expected[dim], rng.size)  # padded blocks when uneven
        if list(res.shape) != expected or res.element_type != src.element_type:
            self.error(
                op,
                f"'slicer.slice' of {src} along dim {dim} over {rng} gives blocks of shape "
                f"{'x'.join(map(str, expected))}, but the result type is {res}",
            )

    def check_range_product(self, op: ir.Operation) -> None:
        major, minor = (RangeType.of(v.type) for v in op.operands)
        result = RangeType.of(op.results[0].type)
        if major is None or minor is None or result is None:
            return self.error(op, "'slicer.range_product' takes and returns well-formed !slicer.range values")
        if set(major.axes) & set(minor.axes):
            return self.error(op, f"'slicer.range_product' of {major} and {minor}: the ranges share an axis")
        want = RangeType(major.axes + minor.axes, major.size * minor.size)
        if result != want:
            self.error(op, f"'slicer.range_product' of {major} and {minor} is {want}, not {result}")

    def mesh_of_range(self, op: ir.Operation, value: ir.Value) -> str | None:
        """The name of the mesh `value` (a range) belongs to."""
        owner = value.owner
        if not isinstance(value, ir.BlockArgument) and owner.operation.name == RANGE_PRODUCT:
            return self.mesh_of_range(op, owner.operation.operands[0])
        if isinstance(value, ir.BlockArgument) and isinstance(owner, ir.Block):
            parent = owner.owner
            if parent is not None and parent.name == LOOP:
                # An unknown mesh is reported once, on the loop itself.
                name = LoopOp(parent).mesh
                return name if name in self.meshes else None
        if len(self.meshes) == 1:
            return next(iter(self.meshes))
        self.error(op, "cannot tell which mesh this range belongs to: it is not a slicer.loop argument and the "
                       "module declares " f"{len(self.meshes)} meshes")
        return None

    # -- shardings ---------------------------------------------------------------------

    def check_annotate(self, op: ir.Operation) -> None:
        view = AnnotateOp(op)
        if view.source.type != view.result.type:
            return self.error(op, f"'slicer.annotate' result type {view.result.type} differs from its source type "
                                  f"{view.source.type}")
        self.check_sharding(op, op.attributes[SHARDING_OPERAND_ATTR], view.source.type, "'slicer.annotate'")

    def check_function_shardings(self, op: ir.Operation) -> None:
        fn_type = ir.FunctionType(ir.TypeAttr(op.attributes[FUNCTION_TYPE_ATTR]).value)
        for key, types, what in ((ARG_ATTRS_ATTR, fn_type.inputs, "argument"),
                                 (RES_ATTRS_ATTR, fn_type.results, "result")):
            if key not in op.attributes:
                continue
            for index, dict_attr in enumerate(ir.ArrayAttr(op.attributes[key])):
                dict_attr = ir.DictAttr(dict_attr)
                if SHARDING_ATTR in dict_attr:
                    self.check_sharding(op, dict_attr[SHARDING_ATTR], types[index], f"{what} #{index}")

    def check_sharding(self, op: ir.Operation, attr: ir.Attribute, type_: ir.Type, what: str) -> None:
        sharding = Sharding.of(attr)
        if sharding is None:
            return self.error(op, f"{what}: expected #slicer.sharding<@mesh, [[axes], ...]>, got {attr}")
        mesh = self.mesh_named(op, sharding.mesh)
        if mesh is None:
            return
        if not isinstance(type_, ir.RankedTensorType):
            return self.error(op, f"{what}: a sharding needs a ranked tensor, got {type_}")
        tensor = ir.RankedTensorType(type_)
        if len(sharding.dims) != tensor.rank:
            return self.error(
                op,
                f"{what}: sharding {sharding} has {len(sharding.dims)} dims but {tensor} has rank {tensor.rank}; "
                "give one axis list per dim ([] for an untiled dim)",
            )
        if not self.check_axes(op, mesh, sharding.used_axes(), f"sharding {sharding}", f"{what}: "):
            return
        for dim, axes in enumerate(sharding.dims):
            size = self.meshes[mesh].group_size(axes)
            if tensor.shape[dim] % size and len(axes) != 1:  # one axis: padded blocks (docs/partition.md)
                return self.error(op, f"{what}: dim {dim} of size {tensor.shape[dim]} is not divisible by {size} "
                                      f"(axes {', '.join(axes)}); a dim that does not divide is tiled over one axis "
                                      "only (padded blocks)")


def _enclosing_loop_using(op: ir.Operation, axis: str) -> ir.Operation | None:
    parent = op.parent
    while parent is not None and parent.name != builtin.ModuleOp.OPERATION_NAME:
        if parent.name == LOOP:
            rng = LoopOp(parent).range
            if rng is not None and axis in rng.axes:
                return parent
        parent = parent.parent
    return None
