"""SPMD partitioning: from a loop program to one SPMD `func.func` per function (`slicer-partition`).

Every device runs the same function on local tensors: loop bodies are inlined with the range bound to the
device's coordinate, slices become nothing or local slices, and where a use needs another distributed type than
its producer gives, the redistribution synthesizer's plan is emitted as collectives located by why they exist.
This module walks a function and types arguments, plain ops and results; the typing rules of slices, loops and
annotations are in `loops_and_slices.py`, conversions in `conversion.py`. The rules: docs/partition.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import func as func_d

from slicer.core.errors import Located, PassFailure
from slicer.core.functions import EntryError, defined_functions, entry_function
from slicer.core.names import (
    ANNOTATE,
    ARG_ATTRS_ATTR,
    AXES_ATTR,
    BLOCKED_ATTR,
    DIST_ATTR,
    DIST_SOURCE_ATTR,
    FUNCTION_TYPE_ATTR,
    GRID,
    LOGICAL_SHAPE_ATTR,
    LOOP,
    RES_ATTRS_ATTR,
    SHAPE_ATTR,
    SHARDING_ATTR,
    SLICE,
    SPMD_MESH_ATTR,
    SYM_NAME_ATTR,
    TACTIC_ATTR,
    YIELD,
)
from slicer.core.operations import nested_ops
from slicer.dialect import (
    LoopOp,
    MeshOp,
    RangeType,
    Sharding,
    find_meshes,
    split_product_slices,
    walk_ops,
)
from slicer.propagation.rotations import op_id, rotations_in
from slicer.redistribution import DistType

from .conversion import PartitionedValue, PartitionState
from .degraded import loss, moves_data, record
from .dist_types import dist_text, local_type, replicated, tensor_shape
from .infer import infer_argument
from .loops_and_slices import partition_annotate, partition_loop, partition_slice
from .partial_terms import first_device_term, partial_terms, split_linear_sum
from .permuted_blocks import partition_rotation
from .tiled_max import reduce_by_max


def partition_module(module: ir.Operation, *, mesh: str = "", entry: str = "") -> None:
    """Partition every function of `module` with a body (or only `entry`) over the `slicer.mesh` named `mesh`
    (default: the only one), in place; raises PassFailure with located diagnostics."""
    split_product_slices(module)  # slices by product ranges become the nested slices handled below
    meshes = find_meshes(module)
    mesh_op = _pick_mesh(module, meshes, mesh)
    try:
        grid = mesh_op.mesh()
    except ValueError as exc:
        raise PassFailure(Located(mesh_op.operation.location, f"slicer-partition: {exc}")) from None
    if entry:
        try:
            funcs = [entry_function(module, entry)]
        except EntryError as exc:
            raise PassFailure(Located(module.location, f"slicer-partition: {exc}")) from None
    else:
        funcs = defined_functions(module)
    calls = list(walk_ops(module, func_d.CallOp.OPERATION_NAME))
    if calls:
        raise PassFailure([Located(c.location, "slicer-partition does not support 'func.call' yet: inline the "
                                               "callee first (e.g. with the upstream 'inline' pass)") for c in calls])
    for func in funcs:
        _FunctionPartitioner(func, mesh_op.sym_name, grid).run()
    still_used = {LoopOp(op).mesh for op in walk_ops(module, LOOP)}
    for name, view in meshes.items():
        if name not in still_used:  # functions left alone (entry=...) keep their slicer.mesh
            _replace_mesh(view)


def _pick_mesh(module: ir.Operation, meshes: dict[str, MeshOp], name: str) -> MeshOp:
    if name:
        if name not in meshes:
            raise PassFailure(Located(module.location, f"slicer-partition: no slicer.mesh @{name} in the module "
                                                       f"(meshes: {', '.join('@' + m for m in meshes) or 'none'})"))
        return meshes[name]
    if not meshes:
        raise PassFailure(Located(module.location, "slicer-partition: the module declares no slicer.mesh (it runs "
                                                   "once, on loop programs; was this module already partitioned?)"))
    if len(meshes) != 1:
        raise PassFailure(Located(module.location, f"slicer-partition needs exactly one slicer.mesh, found "
                                                   f"{len(meshes)}; name one with slicer-partition{{mesh=NAME}}"))
    return next(iter(meshes.values()))


def _replace_mesh(view: MeshOp) -> None:
    """`slicer.mesh` -> `shard.grid` with the same symbol and shape (names kept in `slicer.axes`)."""
    mesh = view.mesh()
    ir.Operation.create(GRID, attributes={
        SYM_NAME_ATTR: ir.StringAttr.get(view.sym_name),
        SHAPE_ATTR: ir.DenseI64ArrayAttr.get(list(mesh.shape)),
        AXES_ATTR: ir.ArrayAttr.get([ir.StringAttr.get(a) for a in mesh.axis_names]),
    }, loc=view.operation.location, ip=ir.InsertionPoint(view.operation))
    view.operation.erase()



@dataclass
class _FunctionPartitioner(PartitionState):
    """Partitions one function: its arguments typed, its body walked in order, each op by its typing rule."""

    def run(self) -> None:
        block = self.func.regions[0].blocks[0]
        arg_attrs = _attr_dicts(self.func, ARG_ATTRS_ATTR, len(block.arguments))
        new_arg_attrs = []
        for index, arg in enumerate(block.arguments):
            attrs = dict(arg_attrs[index])
            shape = tensor_shape(arg)
            if shape is None:
                new_arg_attrs.append(attrs)
                continue
            requested = attrs.pop(SHARDING_ATTR, None)
            if requested is not None:
                sharding = Sharding.of(requested)
                if sharding is None:
                    raise self.fail(self.func, f"argument #{index} has a malformed {SHARDING_ATTR}")
                self.check_mesh(sharding, f"argument #{index}")
                t = DistType(shape, sharding.dims, ())
            else:
                t = infer_argument(arg, self.mesh) or replicated(shape)
            t = self.target(shape, t, self.func.location)
            element = ir.RankedTensorType(arg.type).element_type
            arg.set_type(local_type(t, self.mesh, element))
            origin = f"argument #{index} of @{self.fname}"
            self.env[arg] = PartitionedValue(arg, t, frozenset(), origin, arg.location, shape)
            attrs[DIST_ATTR] = ir.StringAttr.get(t.text())
            if t.shape != shape:
                attrs[LOGICAL_SHAPE_ATTR] = ir.DenseI64ArrayAttr.get(list(shape))
            new_arg_attrs.append(attrs)
        self.process_block(block, frozenset())
        nested = [op for name in (LOOP, SLICE, ANNOTATE) for op in walk_ops(self.func, name) if op not in self.erase]
        if nested:
            parent = nested[0].parent
            raise self.fail(nested[0], f"'{nested[0].name}' inside the region of '{parent.name}' cannot be "
                                       "partitioned: slicer loops, slices and annotations must sit in the function "
                                       "body or in other slicer loops (hoist it out of the region)")
        # Slices and annotations first, users before their sources; then loops, inner before outer (their
        # range arguments are used only by the slices, their results only by erased ops).
        loops = [o for o in self.erase if o.name == LOOP]
        for op in reversed([o for o in self.erase if o.name != LOOP]):
            op.erase()
        for op in loops:
            op.erase()
        self.func.attributes[ARG_ATTRS_ATTR] = ir.ArrayAttr.get([ir.DictAttr.get(a) for a in new_arg_attrs])
        self.func.attributes[SPMD_MESH_ATTR] = ir.StringAttr.get(str(self.mesh))
        record(self.func, self.degraded)
        for op in walk_ops(self.func):
            if BLOCKED_ATTR in op.attributes:  # propagation's note, quoted above where it mattered
                del op.attributes[BLOCKED_ATTR]

    def process_block(self, block: ir.Block, context: frozenset[str]) -> None:
        rotations, chained = rotations_in(block)
        for op in list(block.operations):
            op = op.operation
            rotation = rotations.get(op_id(op)) if rotations else None
            if rotation is not None:
                if not partition_rotation(self, rotation, context):  # partitioned op by op after all
                    for piece in [*rotation.chain, op]:
                        self.process_plain(piece, context)
            elif rotations and op_id(op) in chained:
                continue  # a piece of a rotation, partitioned with it
            elif op.name == LOOP:
                partition_loop(self, op, context, self.process_block)
            elif op.name == SLICE:
                partition_slice(self, op, context)
            elif op.name == ANNOTATE:
                partition_annotate(self, op, context)
            elif op.name == YIELD and op.parent is not None and op.parent.name == LOOP:
                continue  # handled by partition_loop
            elif op.name == func_d.ReturnOp.OPERATION_NAME:
                self.process_return(op, context)
            else:
                self.process_plain(op, context)

    # -- plain ops -----------------------------------------------------------------------------------------
    def process_plain(self, op: ir.Operation, context: frozenset[str]) -> None:
        if reduce_by_max(self, op, context):
            return
        split = split_linear_sum(self, op, context)
        if split is not None:  # the partial sums it adds up, then the rest of it (`partial_terms`)
            for part in split:
                self.process_plain(part, context)
            return
        terms = partial_terms(self, op, context)
        first, partial = dict(terms.first), terms.axes
        operand_pads, losses = {}, []
        for index, operand in enumerate(op.operands):
            if RangeType.is_range(operand.type):
                raise self.fail(op, f"'{op.name}' uses a !slicer.range; only 'slicer.slice' may")
            entry = self.lookup(operand)
            if entry is not None and entry.pads:
                operand_pads[index] = entry.pads
            if entry is not None and index in first:
                op.operands[index] = first_device_term(self, entry.local, first[index], op)
            elif entry is not None and index in terms.kept:
                op.operands[index] = entry.local
            elif entry is not None:
                losses += [entry.loss, loss(entry.tactic, op, f"operand #{index}", entry.type, context, self.mesh)]
                op.operands[index] = self.convert(entry, replicated(entry.type.shape), op,
                                                  f"operand #{index} of '{op.name}' is computed replicated")
        for nested in nested_ops(op):
            for index, operand in enumerate(nested.operands):
                entry = self.lookup(operand)
                if entry is not None:
                    losses += [entry.loss, loss(entry.tactic, op, f"a value '{nested.name}' reads", entry.type,
                                                context, self.mesh)]
                    nested.operands[index] = self.convert(entry, replicated(entry.type.shape), op,
                                                          f"'{nested.name}' inside '{op.name}' reads it replicated")
        lost = [found for found in losses if found is not None and set(found.axes) - context]
        carried = lost[0] if lost and moves_data(op) else None
        if carried is None:
            self.degraded += [found.note(op) for found in lost]
        padded = self.padded_results(op, context, operand_pads)
        dists = []
        for index, result in enumerate(op.results):
            shape = tensor_shape(result)
            if shape is None:
                continue
            t = DistType(shape, replicated(shape).dims, partial) if partial else replicated(shape)
            origin = f"'{op.name}'" + (f" of partial sums over [{','.join(partial)}]" if partial else "")
            self.env[result] = PartitionedValue(result, t, context, origin, op.location, None, padded[index],
                                                loss=carried)
            dists.append(t)
        if dists:
            op.attributes[DIST_ATTR] = ir.ArrayAttr.get([ir.StringAttr.get(dist_text(t, context)) for t in dists])

    # -- return --------------------------------------------------------------------------------------------
    def process_return(self, op: ir.Operation, context: frozenset[str]) -> None:
        res_attrs = _attr_dicts(self.func, RES_ATTRS_ATTR, len(op.operands))
        new_attrs, result_types = [], []
        for index, value in enumerate(op.operands):
            attrs = dict(res_attrs[index])
            entry = self.lookup(value)
            if entry is None:
                new_attrs.append(attrs)
                result_types.append(value.type)
                continue
            requested = attrs.pop(SHARDING_ATTR, None)
            tactic = attrs.pop(TACTIC_ATTR, None)  # a result tactic's label (slicer-apply-tactics)
            if requested is not None:
                sharding = Sharding.of(requested)
                if sharding is None:
                    raise self.fail(self.func, f"result #{index} has a malformed {SHARDING_ATTR}")
                self.check_mesh(sharding, f"result #{index}")
                target = DistType(entry.type.shape, sharding.dims, ())
                why = f"result #{index} of @{self.fname} is requested as {sharding}"
                source = "requested"
            elif tactic is not None:  # the tactic's loop is the returned value: its type is the one asked for
                target = DistType(entry.type.shape, entry.type.dims, ())
                why = f"result #{index} of @{self.fname} is laid out by {ir.StringAttr(tactic).value}"
                source = f"tactic {ir.StringAttr(tactic).value}"
            else:
                target = DistType(entry.type.shape, entry.type.dims, ())
                why = (f"result #{index} of @{self.fname} has no requested sharding: it keeps its propagated type "
                       f"{target} with the partial sums reduced")
                source = "default"
            target = self.target(entry.shape, target, op.location)
            local = self.convert(entry, target, op, why)
            op.operands[index] = local
            attrs[DIST_ATTR] = ir.StringAttr.get(target.text())
            if target.shape != entry.shape:
                attrs[LOGICAL_SHAPE_ATTR] = ir.DenseI64ArrayAttr.get(list(entry.shape))
            attrs[DIST_SOURCE_ATTR] = ir.StringAttr.get(source)
            new_attrs.append(attrs)
            result_types.append(local.type)
        inputs = [a.type for a in self.func.regions[0].blocks[0].arguments]
        self.func.attributes[FUNCTION_TYPE_ATTR] = ir.TypeAttr.get(ir.FunctionType.get(inputs, result_types))
        self.func.attributes[RES_ATTRS_ATTR] = ir.ArrayAttr.get([ir.DictAttr.get(a) for a in new_attrs])





def _attr_dicts(func: ir.Operation, name: str, count: int) -> list[dict]:
    if name not in func.attributes:
        return [{} for _ in range(count)]
    dicts = [ir.DictAttr(d) for d in ir.ArrayAttr(func.attributes[name])]
    return [{d[i].name: d[i].attr for i in range(len(d))} for d in dicts]
