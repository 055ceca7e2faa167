"""SPMD partitioning: from a loop program to one SPMD `func.func` per function (`slicer-partition`).

Input ("propagated program"): functions whose partitioning is written with `slicer.loop` nests over mesh axes
(`tile<d>` / `sum`), `slicer.slice` ops slicing values defined outside their loop, plain ops (replicated
computation), `slicer.annotate` (a required distribution) and `slicer.sharding` argument/result attributes.

Output: every device runs the same function on local tensors. Loop bodies are inlined with the range bound to
the device's coordinate (`shard.process_multi_index`); a slice of a value the device already holds is nothing,
of a value it holds whole a local `tensor.extract_slice`; `sum` loops leave partial sums. Where a use needs
another distributed type than its producer gives, the redistribution synthesizer's plan is emitted as
collectives (`slicer.spmd.emit_collectives`). Every value carries its type in `slicer.dist`; the `slicer.mesh` becomes a
`shard.grid` (axis names kept in `slicer.axes`); the function gets `slicer.spmd_mesh = "x=2,y=4"`. Each collective's
location is `NameLoc("<why>", FusedLoc[consumer location, producer location])`, so provenance (tactic
NameLocs from slicer-apply-tactics, the op, the loop) survives to `slicer-opt --print-collectives`.

The typing rules (argument, plain op, slice, loop, annotate, return): the table of docs/partition.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mlir import ir
from mlir.dialects import func as func_d

from slicer.core import dtypes
from slicer.core.errors import Located, PassFailure, Unsupported
from slicer.core.functions import EntryError, defined_functions, entry_function, function_name
from slicer.core.names import (
    ANNOTATE,
    ARG_ATTRS_ATTR,
    AXES_ATTR,
    BLOCKED_ATTR,
    CONFLICT_ATTR,
    DIST_ATTR,
    DIST_SOURCE_ATTR,
    FUNCTION_TYPE_ATTR,
    GRID,
    GRID_ATTR,
    INDEX_AXES_ATTR,
    LOGICAL_SHAPE_ATTR,
    LOOP,
    MULTI_INDEX,
    RES_ATTRS_ATTR,
    RULE_ATTR,
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
    AnnotateOp,
    LoopOp,
    MeshOp,
    RangeType,
    Sharding,
    SliceOp,
    SumAction,
    TileAction,
    find_meshes,
    split_product_slices,
    walk_ops,
)
from slicer.redistribution import DistType, Mesh, RedistributionError, plan, subaxes

from .degraded import Loss, loss, moves_data, record
from .dist_types import dist_text, local_type, replicated, tensor_shape, with_major, without_axes
from .emit_collectives import PlanEmitter
from .infer import infer_argument
from .padding import Pad, padded_type, pads_through, repad
from .partial_terms import first_device_term, partial_terms, split_linear_sum
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
class _Entry:
    """What a value of the loop program has become: its local SSA value, distributed type and context."""

    local: ir.Value
    type: DistType
    context: frozenset[str]
    origin: str
    loc: ir.Location
    logical: tuple[int, ...] | None = None  # the value's true shape when `type`'s is padded (uneven tiles)
    pads: dict = field(default_factory=dict)  # in loop bodies: dim -> padding.Pad, dims of padded blocks
    tactic: str = ""  # the tactic whose loop tiled it (a degraded strategy names it when the value is gathered)
    loss: Loss | None = None  # a gathered tactic value it was reshaped or copied from (slicer.spmd.degraded)

    @property
    def shape(self) -> tuple[int, ...]:
        """The value's logical global shape (`type.shape` rounds uneven tiled dims up)."""
        return self.logical or self.type.shape


@dataclass
class _FunctionPartitioner:
    func: ir.Operation
    grid: str
    mesh: Mesh
    env: dict = field(default_factory=dict)
    cache: dict = field(default_factory=dict)
    ranges: dict = field(default_factory=dict)
    erase: list = field(default_factory=list)
    degraded: list = field(default_factory=list)
    _coords: list | None = None

    @property
    def fname(self) -> str:
        return function_name(self.func)

    # -- helpers -------------------------------------------------------------------------------------------
    def canon(self, t: DistType, loc: ir.Location) -> DistType:
        try:
            return DistType.of(self.mesh, t.shape, t.dims, t.partial)
        except RedistributionError as exc:
            raise PassFailure(Located(loc, f"slicer-partition: {exc}")) from None

    def valid(self, entry: _Entry, t: DistType) -> bool:
        """Can `entry`'s value take the tiling of `t` (dims that do not divide as padded blocks over one axis)?"""
        try:
            t = padded_type(self.mesh, entry.shape, t)
            DistType.of(self.mesh, t.shape, t.dims, t.partial)
        except RedistributionError:
            return False
        return True

    def target(self, logical: tuple[int, ...], t: DistType, loc: ir.Location) -> DistType:
        """`t`'s tiling on a value of logical shape `logical`: canonical, uneven dims padded."""
        try:
            return self.canon(padded_type(self.mesh, logical, t), loc)
        except RedistributionError as exc:
            raise PassFailure(Located(loc, f"slicer-partition: {exc}")) from None

    def coords(self) -> list[ir.Value]:
        if self._coords is None:
            block = self.func.regions[0].blocks[0]
            op = ir.Operation.create(
                MULTI_INDEX, results=[ir.IndexType.get()] * self.mesh.ndim,
                attributes={GRID_ATTR: ir.FlatSymbolRefAttr.get(self.grid),
                            INDEX_AXES_ATTR: ir.DenseI16ArrayAttr.get(list(range(self.mesh.ndim)))},
                loc=self.func.location, ip=ir.InsertionPoint.at_block_begin(block))
            self._coords = list(op.results)
        return self._coords

    def lookup(self, value: ir.Value) -> _Entry | None:
        return self.env.get(value)

    def convert(self, entry: _Entry, target: DistType, before: ir.Operation, why: str) -> ir.Value:
        """`entry`'s local value redistributed to `target`'s tiling, emitted before `before` (cached per
        target). The target's shape is recomputed from the value's logical shape (uneven dims padded)."""
        target = self.target(entry.shape, target, before.location)
        if entry.type == target:
            return entry.local
        key = (entry.local, entry.type, target)
        if key in self.cache:
            return self.cache[key]
        element = str(ir.RankedTensorType(entry.local.type).element_type)
        if dtypes.numpy_dtype(element) is None:
            raise PassFailure(Located(before.location, f"slicer-partition: cannot redistribute {entry.origin}: "
                                                       f"{dtypes.unsupported(element)}"))
        source = entry
        if target.shape != entry.type.shape:
            source = repad(self, entry, target, before, why)
        local = source.local if source.type == target else self.emit_plan(source, target, before, why)
        self.cache[key] = local
        return local

    def emit_plan(self, entry: _Entry, target: DistType, before: ir.Operation, why: str) -> ir.Value:
        """The synthesizer's plan from `entry`'s type to `target` (same padded shape), emitted before `before`."""
        element = str(ir.RankedTensorType(entry.local.type).element_type)
        try:
            # Devices differing on the entry's loop axes hold different members of its family: the plan
            # must not communicate over those axes.
            p = plan(self.mesh, entry.type, target, dtype=element, frozen=tuple(sorted(entry.context)))
        except RedistributionError as exc:
            raise PassFailure(Located(before.location, f"slicer-partition: cannot redistribute {entry.origin} from "
                                                       f"{entry.type} to {target} for {why}: {exc}")) from None
        reason_base = f"{why}; source: {entry.origin} {entry.type} -> {target}"
        if CONFLICT_ATTR in before.attributes:  # recorded by slicer-propagate on the consumer
            reason_base += f"; {ir.StringAttr(before.attributes[CONFLICT_ATTR]).value}"

        def loc(step) -> ir.Location:
            child = ir.Location.fused([before.location, entry.loc])
            return ir.Location.name(f"{step.op}: {reason_base}", childLoc=child)

        with ir.InsertionPoint(before):
            return PlanEmitter(self.mesh, self.grid, self.coords).emit(entry.local, p, loc)

    def check_mesh(self, sharding: Sharding, what: str, op: ir.Operation | None = None) -> None:
        if sharding.mesh != self.grid:
            raise self.fail(op or self.func, f"{what} requests a sharding over mesh @{sharding.mesh}, but "
                                             f"@{self.fname} is partitioned over @{self.grid}; use one mesh per "
                                             "function")

    def fail(self, op: ir.Operation, message: str) -> PassFailure:
        return PassFailure(Located(op.location, f"slicer-partition: {message}"))

    # -- driver --------------------------------------------------------------------------------------------
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
            self.env[arg] = _Entry(arg, t, frozenset(), f"argument #{index} of @{self.fname}", arg.location, shape)
            attrs[DIST_ATTR] = ir.StringAttr.get(t.spec())
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
        for op in list(block.operations):
            op = op.operation
            if op.name == LOOP:
                self.process_loop(op, context)
            elif op.name == SLICE:
                self.process_slice(op, context)
            elif op.name == ANNOTATE:
                self.process_annotate(op, context)
            elif op.name == YIELD and op.parent is not None and op.parent.name == LOOP:
                continue  # handled by process_loop
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
        losses = [found for found in losses if found is not None and set(found.axes) - context]
        carried = losses[0] if losses and moves_data(op) else None
        if carried is None:
            self.degraded += [found.note(op) for found in losses]
        padded = self.padded_results(op, context, operand_pads)
        dists = []
        for index, result in enumerate(op.results):
            shape = tensor_shape(result)
            if shape is None:
                continue
            t = DistType(shape, replicated(shape).dims, partial) if partial else replicated(shape)
            origin = f"'{op.name}'" + (f" of partial sums over [{','.join(partial)}]" if partial else "")
            self.env[result] = _Entry(result, t, context, origin, op.location, None, padded[index], loss=carried)
            dists.append(t)
        if dists:
            op.attributes[DIST_ATTR] = ir.ArrayAttr.get([ir.StringAttr.get(dist_text(t, context)) for t in dists])

    def padded_results(self, op: ir.Operation, context: frozenset[str], operand_pads: dict) -> list[dict]:
        """The padded dims of each result of `op` (`operand_pads`: operand index -> its padded dims); an op
        reducing over a padded dim is masked so the padding never reaches a real value (`padding.pads_through`)."""
        if not operand_pads:
            return [{} for _ in op.results]
        emitter = PlanEmitter(self.mesh, self.grid, self.coords)

        def mark(made: ir.Operation) -> None:
            shape = tuple(ir.RankedTensorType(made.results[0].type).shape)
            made.attributes[DIST_ATTR] = ir.ArrayAttr.get([ir.StringAttr.get(dist_text(replicated(shape), context))])

        try:
            return pads_through(op, operand_pads, emitter.group_index, mark)
        except Unsupported as exc:
            raise self.fail(op, f"'{op.name}' cannot compute on padded blocks: {exc}") from None

    # -- slices --------------------------------------------------------------------------------------------
    def process_slice(self, op: ir.Operation, context: frozenset[str]) -> None:
        view = SliceOp(op)
        axes = self.ranges.get(view.range_value)
        if axes is None:
            raise self.fail(op, "'slicer.slice' range is not the argument of an enclosing slicer.loop; the "
                                "partitioner binds ranges only to enclosing loops")
        entry = self.lookup(view.source)
        if entry is None:
            raise self.fail(op, f"'slicer.slice' source of type {view.source.type} is not a static tensor value "
                                "defined in this function")
        dim = view.dim
        if set(axes) & entry.context:
            self.slice_own_member(op, view, entry, axes, context)
            return
        if dim in entry.pads:
            raise self.fail(op, f"'slicer.slice' over [{','.join(axes)}] cuts dim {dim}, which already holds padded "
                                f"blocks ({entry.pads[dim].describe()}); an uneven dim is cut over one axis only")
        new_axes = (context - entry.context)
        wanted = with_major(without_axes(entry.type, new_axes), dim, axes)
        if not self.valid(entry, wanted):
            # Keeping the source's own tiles of dim `dim` as minor tiles under `axes` does not divide the
            # dim (another tactic tiled it over other axes): the slice needs dim `dim` over `axes` alone.
            wanted = DistType(wanted.shape, tuple(tuple(axes) if i == dim else d for i, d in enumerate(wanted.dims)),
                              wanted.partial)
        wanted = self.target(entry.shape, wanted, op.location)
        local = self.convert(entry, wanted, op,
                             f"'slicer.slice' of dim {dim} over [{','.join(axes)}] needs the source tiled major by "
                             f"[{','.join(axes)}] on dim {dim}")
        result_shape = tensor_shape(view.result)
        rest = tuple(wanted.dims[dim][len(axes):])
        dims = tuple(rest if i == dim else d for i, d in enumerate(wanted.dims))
        t = self.target(result_shape, DistType(result_shape, dims, wanted.partial), op.location)  # other dims
        pads = dict(entry.pads)
        if wanted.shape[dim] != entry.shape[dim]:  # padded blocks: the device's tail rows are padding
            pads[dim] = Pad(entry.shape[dim], result_shape[dim], tuple(axes))
        self.env[view.result] = _Entry(local, t, context, f"slice of {entry.origin}", op.location, result_shape, pads,
                                       entry.tactic)
        self.erase.append(op)

    def slice_own_member(self, op: ir.Operation, view: SliceOp, entry: _Entry, axes: tuple[str, ...],
                         context: frozenset[str]) -> None:
        """`slice(v, d, r)` where `v` is itself computed inside the loop over `r`'s axes: device `r` takes block
        `r` of its own member `v(r)`, a purely local slice (no plan: a plan over those axes would mix members)."""
        if not set(axes) <= entry.context:
            raise self.fail(op, f"'slicer.slice' over [{','.join(axes)}] of a value computed inside loops over only "
                                "some of these axes is not supported; slice by one loop's range at a time")
        dim = view.dim
        if entry.shape[dim] % subaxes.group_size(self.mesh, axes) or dim in entry.pads:
            raise self.fail(op, f"'slicer.slice' over [{','.join(axes)}] of a value computed inside that loop cuts "
                                f"dim {dim} of size {entry.shape[dim]} unevenly; padded blocks are cut from values "
                                "defined outside the loop: make the size divisible or slice the loop's input")
        whole = without_axes(entry.type, context - entry.context)
        whole = DistType(whole.shape, tuple(() if i == dim else d for i, d in enumerate(whole.dims)), whole.partial)
        local = self.convert(entry, whole, op, f"'slicer.slice' of dim {dim} takes a block of the whole dim")
        emitter = PlanEmitter(self.mesh, self.grid, self.coords)
        with ir.InsertionPoint(op):
            where = ir.Location.name(f"local block of dim {dim} over [{','.join(axes)}]", childLoc=op.location)
            local = emitter.local_block(local, dim, axes, where)
        t = self.canon(DistType(tensor_shape(view.result), whole.dims, whole.partial), op.location)
        local.owner.attributes[DIST_ATTR] = ir.ArrayAttr.get([ir.StringAttr.get(dist_text(t, context))])
        self.env[view.result] = _Entry(local, t, context, f"slice of {entry.origin}", op.location, tactic=entry.tactic)
        self.erase.append(op)

    # -- loops ---------------------------------------------------------------------------------------------
    def process_loop(self, op: ir.Operation, context: frozenset[str]) -> None:
        loop = LoopOp(op)
        if loop.mesh != self.grid:
            raise self.fail(op, f"'slicer.loop' is over mesh @{loop.mesh} but the function is partitioned over "
                                f"@{self.grid}; use one mesh per module or pick it with slicer-partition{{mesh=...}}")
        rng, action = loop.range, loop.action
        if rng is None or action is None:
            raise self.fail(op, "malformed 'slicer.loop' (run slicer-verify for details)")
        axes = tuple(rng.axes)
        clash = [a for a in axes if a in context]
        if clash:
            raise self.fail(op, f"'slicer.loop' over [{','.join(axes)}] is nested in a loop over the same mesh axis "
                                f"'{clash[0]}'; a device has one coordinate per axis, so each axis can be looped "
                                "over once per nest")
        body_context = context | frozenset(axes)
        self.ranges[loop.range_arg] = axes
        self.process_block(loop.body, body_context)
        terminator = loop.terminator
        if terminator is None or terminator.name != YIELD:
            raise self.fail(op, f"'slicer.loop' body must end in '{YIELD}'")
        kind = f"{action} loop over [{','.join(axes)}]"
        for index, (value, result) in enumerate(zip(list(terminator.operands), loop.results)):
            entry = self.lookup(value)
            if entry is None:
                raise self.fail(op, f"'slicer.loop' result #{index} is not a static tensor")
            inner = without_axes(entry.type, body_context - entry.context)
            local = self.convert(entry, inner, terminator, f"yield #{index} of the {kind}")
            shape = tensor_shape(result)
            pads = dict(entry.pads)
            if isinstance(action, TileAction):
                dims = tuple(axes + inner.dims[action.dim] if i == action.dim else d for i, d in enumerate(inner.dims))
                t = DistType(shape, dims, inner.partial)
                pad = pads.pop(action.dim, None)
                if pad is not None and (pad.axes != axes or pad.size != shape[action.dim]):
                    raise self.fail(op, f"'slicer.loop' result #{index} assembles over [{','.join(axes)}] padded "
                                        f"blocks of another cut ({pad.describe()}); tile it over one axis only")
            else:
                t = DistType(shape, inner.dims, inner.partial + axes)
            t = self.target(shape, t, op.location)
            if t.local_shape(self.mesh) != inner.local_shape(self.mesh):
                raise self.fail(op, f"'slicer.loop' result #{index} of type {result.type} is tiled as {t}, whose "
                                    f"blocks are {t.local_shape(self.mesh)}, but the body yields {inner} blocks of "
                                    f"{inner.local_shape(self.mesh)}: an uneven dim is cut into padded blocks over "
                                    "one axis at a time (tile it over one axis)")
            origin = ("partial sums of the " if isinstance(action, SumAction) else "result of the ") + kind
            origin += _provenance(op) + f" yielding {entry.origin}"
            tactic = ir.StringAttr(op.attributes[TACTIC_ATTR]).value if TACTIC_ATTR in op.attributes else entry.tactic
            self.env[result] = _Entry(local, t, context, origin, ir.Location.fused([op.location, entry.loc]),
                                      shape, pads, tactic)
        body_ops = [o.operation for o in loop.body.operations]
        for body_op in body_ops[:-1]:
            body_op.move_before(op)
        terminator.erase()  # its operands stay used by nothing; the loop results are rewritten by their users
        del self.ranges[loop.range_arg]
        self.erase.append(op)

    # -- annotations, return -------------------------------------------------------------------------------
    def process_annotate(self, op: ir.Operation, context: frozenset[str]) -> None:
        view = AnnotateOp(op)
        entry = self.lookup(view.source)
        sharding = view.sharding
        if entry is None or sharding is None:
            raise self.fail(op, "'slicer.annotate' needs a static tensor source and a #slicer.sharding")
        self.check_mesh(sharding, "'slicer.annotate'", op)
        used = [a for a in sharding.used_axes() if a in context]
        if used:
            raise self.fail(op, f"'slicer.annotate' inside a loop over '{used[0]}' requests a sharding over that axis; "
                                "inside the loop the value is one block per index: annotate outside the loop")
        target = self.target(entry.shape, DistType(entry.type.shape, sharding.dims, ()), op.location)
        local = self.convert(entry, target, op, f"'slicer.annotate' requests {sharding}")
        self.env[view.result] = _Entry(local, target, context, f"annotated {entry.origin}", op.location,
                                       entry.logical, entry.pads, entry.tactic)
        self.erase.append(op)

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
            attrs[DIST_ATTR] = ir.StringAttr.get(target.spec())
            if target.shape != entry.shape:
                attrs[LOGICAL_SHAPE_ATTR] = ir.DenseI64ArrayAttr.get(list(entry.shape))
            attrs[DIST_SOURCE_ATTR] = ir.StringAttr.get(source)
            new_attrs.append(attrs)
            result_types.append(local.type)
        inputs = [a.type for a in self.func.regions[0].blocks[0].arguments]
        self.func.attributes[FUNCTION_TYPE_ATTR] = ir.TypeAttr.get(ir.FunctionType.get(inputs, result_types))
        self.func.attributes[RES_ATTRS_ATTR] = ir.ArrayAttr.get([ir.DictAttr.get(a) for a in new_attrs])


def _provenance(loop: ir.Operation) -> str:
    """The tactic/rule that created a loop, when slicer-apply-tactics or slicer-propagate recorded them."""
    notes = []
    for attr, label in ((TACTIC_ATTR, "tactic"), (RULE_ATTR, "rule"), (CONFLICT_ATTR, "conflict")):
        if attr in loop.attributes:
            value = loop.attributes[attr]
            notes.append(f"{label} {ir.StringAttr(value).value if isinstance(value, ir.StringAttr) else value}")
    return f" ({'; '.join(notes)})" if notes else ""


def _attr_dicts(func: ir.Operation, name: str, count: int) -> list[dict]:
    if name not in func.attributes:
        return [{} for _ in range(count)]
    dicts = [ir.DictAttr(d) for d in ir.ArrayAttr(func.attributes[name])]
    return [{d[i].name: d[i].attr for i in range(len(d))} for d in dicts]
