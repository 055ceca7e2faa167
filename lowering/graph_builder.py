"""Building a kernel graph (`kernel_graph.KernelGraph`) from an SPMD module: the function cut at its collectives,
each collective-free segment emitted as one kernel `func.func`, each collective read as its redistribution step.

Apart from `kernel_graph` so that the graph's data (JSON, liveness, printing), which every MPI rank reads, does not
need the MLIR bindings: only building one does.
"""

from __future__ import annotations

import bisect
from typing import Any

from mlir import ir
from mlir.dialects import (
    arith,
    func,
    linalg,
    shard,  # noqa: F401  (registers the op views read below: op.opview.reduction, .axes)
    tensor,
)

from slicer.core.errors import KernelGraphError
from slicer.core.functions import EntryError, entry_function, function_name
from slicer.core.linalg_facts import VIEW_OPS
from slicer.core.names import DIST_ATTR, DIST_SOURCE_ATTR, GRID_ATTR, LOGICAL_SHAPE_ATTR, MULTI_INDEX, SPMD_MESH_ATTR
from slicer.core.operations import as_op, defining_op, nested_ops, walk_ops
from slicer.dialect import grids, make_context
from slicer.redistribution import DistType, Mesh, subaxes
from slicer.redistribution.steps import REDUCTIONS, STEP_OF_IR
from slicer.spmd.dist_types import parse_dist_text, varying_axes

from .cut import cut
from .kernel_graph import CollectiveNode, KernelGraph, KernelNode, Value
from .sinking import sink_past_collectives
from .widenings import is_widening

_REMAT = (tensor.EmptyOp.OPERATION_NAME, arith.ConstantOp.OPERATION_NAME, linalg.FillOp.OPERATION_NAME, MULTI_INDEX)
_RETURN = func.ReturnOp.OPERATION_NAME


class _OpReader:
    """A collective op's attributes as its step class reads them (`Collective.from_ir`)."""

    def __init__(self, op: ir.Operation, mesh: Mesh, names: tuple[str, ...], grid: str | None):
        self.op, self.mesh, self.names, self.grid = op, mesh, names, grid

    def dim(self, attr: str) -> int:
        return ir.IntegerAttr(self.op.attributes[attr]).value

    def group(self, attr: str) -> tuple[str, ...]:
        """The mesh axes of a grid-axes attribute (() when absent); the op's grid may refine the mesh's (its
        `slicer.axes` name the parts, e.g. y:(2)2)."""
        if attr not in self.op.attributes:
            return ()
        indices = list(ir.DenseI16ArrayAttr(self.op.attributes[attr]))
        if any(not 0 <= i < len(self.names) for i in indices):
            raise KernelGraphError(f"'{self.op.name}' names grid axis {max(indices)} but @{self.grid} has "
                                   f"{len(self.names)} axes")
        return subaxes.canonical(self.mesh, tuple(self.names[i] for i in indices))

    def ints(self, attr: str) -> list[int]:
        return [int(v) for v in ir.DenseI64ArrayAttr(self.op.attributes[attr])]

    def reduction(self, attr: str) -> str:
        if attr not in self.op.attributes:
            return "sum"  # the op's default
        text = str(self.op.attributes[attr])
        found = next((r for r in REDUCTIONS if f" {r}>" in text), None)
        if found is None:
            raise KernelGraphError(f"'{self.op.name}' with reduction {text}: only {', '.join(REDUCTIONS)} are "
                                   "supported")
        return found


def location_text(location: ir.Location) -> str:
    """`file:line:col` of a plain file location (where a value is defined in the source), else ""."""
    return f"{location.filename}:{location.start_line}:{location.start_col}" if location.is_a_file() else ""


def build_kernel_graph(module, entry: str | None = None) -> KernelGraph:
    """Cut the SPMD function `entry` (default: the only one) of `module` (text or IR) into a kernel graph."""
    text = module if isinstance(module, str) else str(module)
    with make_context(), ir.Location.unknown():
        return _Builder(ir.Module.parse(text), entry).build()


def _moved(ops: list, after: dict[int, list], gone: set[int]) -> list:
    """`ops` without the ones at positions `gone`, and with `after[i]` (ops, in order) right after position `i`
    (whether the op there stays or is moved itself)."""
    if not gone:
        return ops
    found = []
    for i, op in enumerate(ops):
        if i not in gone:
            found.append(op)
        found += after.get(i, [])
    return found


def _rematerialisable(op: ir.Operation) -> bool:
    """Ops recomputed in every kernel that uses them instead of being passed between kernels: views (`VIEW_OPS`: the
    kernel takes their source and applies the view again, so no kernel returns a view beside its source, two
    blocks of the same bytes both stored: a GPT training step returned each MLP input as [8,64,128] and as its
    [512,128]), cheap ops (`_cheap`) and widenings (`widenings.is_widening`: a kernel takes the bf16 tensor and
    widens it itself, where fusion folds the widening into its readers, instead of a kernel storing the f32 copy
    for another: a layer norm's output widened at the end of one kernel made the next kernel's q, k and v
    projections f32 GEMMs)."""
    return op.name in VIEW_OPS or _cheap(op) or is_widening(op)


def _recomputed_from_source(op: ir.Operation) -> bool:
    """A view or a widening: a kernel reading it outside the kernel that makes it recomputes it from its source,
    which that kernel then returns."""
    return op.name in VIEW_OPS or is_widening(op)


def _cheap(op: ir.Operation) -> bool:
    """Constants, `tensor.empty`, fills of constants (into a tensor that is itself cheap: a fill into a slice of
    another kernel's value must read that value), the device index and scalar `arith` on those."""
    if op.name in _REMAT or _constant_generic(op):
        return all(isinstance(v.owner, ir.Block) or not isinstance(v.type, ir.RankedTensorType)
                   or _cheap(as_op(v.owner)) for v in op.operands)
    return (op.name.startswith("arith.") and not op.regions
            and not any(isinstance(r.type, ir.ShapedType) for r in op.results))


def _constant_generic(op: ir.Operation) -> bool:
    """A `linalg.generic` with no inputs yielding a constant at every point (a fill in generic form: the
    importer's zero init of a matmul's accumulator). Passed between kernels it was made where the partitioner
    hoists it, at the top of the function, and stored from there to its use: a GPT-2 block's fc1 accumulator,
    0.5 MiB a device under data parallelism, from the first kernel to the MLP's."""
    if op.name != linalg.GenericOp.OPERATION_NAME or len(op.operands) != len(op.results) or len(op.regions) != 1:
        return False
    inner = [as_op(o) for o in op.regions[0].blocks[0].operations]
    if not inner or any(o.name not in (linalg.YieldOp.OPERATION_NAME, arith.ConstantOp.OPERATION_NAME) for o in inner):
        return False
    return all(not isinstance(v.owner, ir.Block) and _cheap(as_op(v.owner)) for v in inner[-1].operands)


class _Builder:
    def __init__(self, module: ir.Module, entry: str | None):
        self.module = module  # keeps the IR alive: the views below do not own it
        try:
            self.func = entry_function(module, entry)
        except EntryError as exc:
            raise KernelGraphError(f"which SPMD function? {exc}") from None
        self.name = function_name(self.func)
        if SPMD_MESH_ATTR not in self.func.attributes:
            raise KernelGraphError(f"@{self.name} has no '{SPMD_MESH_ATTR}' attribute: run slicer-partition first")
        self.mesh = Mesh.parse(ir.StringAttr(self.func.attributes[SPMD_MESH_ATTR]).value)
        self.block = self.func.regions[0].blocks[0]
        self.grids = {symbol: tuple(axes) for symbol, (axes, _) in grids(module).items()}
        self.names: dict = {}
        self.arg_shapes: dict = {}
        self.result_shapes: dict = {}
        self.values: dict[str, Value] = {}
        self.kernels = ir.Module.create()

    def name_of(self, value: ir.Value) -> str:
        if value not in self.names:
            self.names[value] = f"%{len(self.names)}"
        return self.names[value]

    def record(self, value: ir.Value, dist: DistType) -> str:
        name = self.name_of(value)
        t = ir.RankedTensorType(value.type)
        varying: tuple[str, ...] = ()
        loc = ""
        if isinstance(value.owner, ir.Block):
            loc = location_text(ir.BlockArgument(value).location)
        else:
            owner = as_op(value.owner)
            loc = location_text(owner.location)
            if DIST_ATTR in owner.attributes:
                texts = ir.ArrayAttr(owner.attributes[DIST_ATTR])
                varying = varying_axes(ir.StringAttr(texts[ir.OpResult(value).result_number]).value)
        self.values[name] = Value(name, tuple(t.shape), str(t.element_type), dist, varying, loc)
        return name

    def func_dist(self, which: str, index: int, type_: ir.Type) -> tuple[DistType, str]:
        """The type of argument (``which="arg"``) or result (``"res"``) ``index`` of the function, and where
        it comes from ("requested" or "default")."""
        view = as_op(self.func).opview
        dicts = view.arg_attrs if which == "arg" else view.res_attrs
        entry = ir.DictAttr(dicts[index]) if dicts is not None else None
        if entry is None or DIST_ATTR not in entry:
            raise KernelGraphError(f"{which} #{index} of @{self.name} has no '{DIST_ATTR}' type")
        source = ir.StringAttr(entry[DIST_SOURCE_ATTR]).value if DIST_SOURCE_ATTR in entry else "requested"
        if LOGICAL_SHAPE_ATTR in entry:
            (self.arg_shapes if which == "arg" else self.result_shapes)[index] = tuple(
                ir.DenseI64ArrayAttr(entry[LOGICAL_SHAPE_ATTR]))
        return parse_dist_text(ir.StringAttr(entry[DIST_ATTR]).value, tuple(ir.RankedTensorType(type_).shape),
                               self.mesh), source

    def op_dist(self, op: ir.Operation, result: ir.Value) -> DistType:
        if DIST_ATTR not in op.attributes:
            raise KernelGraphError(f"'{op.name}' has no '{DIST_ATTR}' type: run slicer-partition first")
        texts = ir.ArrayAttr(op.attributes[DIST_ATTR])
        return parse_dist_text(ir.StringAttr(texts[ir.OpResult(result).result_number]).value,
                               tuple(ir.RankedTensorType(result.type).shape), self.mesh)

    def build(self) -> KernelGraph:
        args = tuple(self.record(a, self.func_dist("arg", i, a.type)[0]) for i, a in enumerate(self.block.arguments))
        ops = [as_op(o) for o in self.block.operations]
        ret = ops[-1]
        ops = self.sink_views(self.sink_argument_collectives(ops[:-1]))
        ops = sink_past_collectives(ops, lambda op: op.name in STEP_OF_IR,
                                    lambda op: STEP_OF_IR[op.name].point_to_point, _rematerialisable,
                                    _recomputed_from_source) + [ret]
        self.position = {r: i for i, op in enumerate(ops) for r in op.results}
        nodes: list = []
        for item in self.segment(ops[:-1]):
            if isinstance(item, list):
                node = self.kernel(item, f"kernel_{sum(isinstance(n, KernelNode) for n in nodes)}")
                if node is not None:
                    nodes.append(node)
            else:
                nodes.append(self.collective(item))
        results, sources, dists = [], [], []
        for i, v in enumerate(ret.operands):
            dist, source = self.func_dist("res", i, v.type)
            name = self.name_of(v)
            if name not in self.values:
                self.record(v, dist)
            results.append(name)
            sources.append(source)
            dists.append(dist)
        return KernelGraph(self.name, self.mesh, self.values, args, tuple(results), tuple(sources), tuple(dists),
                           nodes, str(self.kernels), self.arg_shapes, self.result_shapes)

    def sink_argument_collectives(self, ops: list) -> list:
        """`ops` with each collective of an argument (or of a view of one) moved, with the views and collectives of
        its result before its first other reader, to just after the last collective before that reader: the
        partitioner puts the all_gather of a weight where the source program views it, and an imported program
        views the weights at the top (a query weight reshaped per head). Gathered there, every layer's weight was
        held from the first kernel on: FSDP's GPT forward on 8 devices 1.32 MB against 0.79 MB, its layers' weights
        gathered one after the other. Moved, it is among the collectives before the kernel reading it, so kernels
        and their cuts stay as they were; the runtime starts it one kernel ahead
        (`runtime.execution.executor.schedule`)."""
        where = {op: i for i, op in enumerate(ops)}
        collectives = [i for i, op in enumerate(ops) if op.name in STEP_OF_IR]
        after: dict[int, list[int]] = {}  # a collective's position -> the ops moved after it
        gone: set[int] = set()
        for i in collectives:
            if i in gone or not self.from_arguments(ops[i].operands[0]):
                continue
            chain, first, stack = [i], len(ops), [i]
            while stack:  # the views and collectives of its result, and its first other reader
                for user in self.users(ops[stack.pop()]):
                    k = where.get(user)
                    if k is None:
                        continue  # (the function's return)
                    if user.name in VIEW_OPS or user.name in STEP_OF_IR:
                        chain.append(k)
                        stack.append(k)
                    else:
                        first = min(first, k)
            last = bisect.bisect_left(collectives, first) - 1  # the last collective before the first reader
            if last < 0 or collectives[last] <= max(c for c in chain if c < first):
                continue  # none comes between: it stays
            chain = [c for c in set(chain) if c <= collectives[last]]
            after.setdefault(collectives[last], []).extend(chain)
            gone.update(chain)
        return _moved(ops, {i: [ops[j] for j in sorted(moved)] for i, moved in after.items()}, gone)

    def from_arguments(self, value: ir.Value) -> bool:
        """`value` is a function argument or a view of one."""
        while not isinstance(value.owner, ir.Block):
            owner = as_op(value.owner)
            if owner.name not in VIEW_OPS or not owner.operands:
                return False
            value = owner.operands[0]
        return as_op(value.owner.owner) == self.func if hasattr(value.owner, "owner") else False

    def users(self, op: ir.Operation) -> list:
        """The top-level ops reading `op`'s results."""
        return [self.top_level(as_op(u.owner)) for r in op.results for u in r.uses]

    def sink_views(self, ops: list) -> list:
        """`ops` with each view read only by collectives moved after the last collective before its first reader:
        a collective reads a kernel's output, so a view made early (the partitioner hoists the views of arguments
        to the top: a weight reshaped per head before its all_gather) was returned by the first kernel and stored
        beside its source until the collective; made in the kernel just before it, it is stored only across it."""
        where = {op: i for i, op in enumerate(ops)}
        later: dict[int, list] = {}  # a collective's position -> the views moved after it
        moved = set()
        for i, op in enumerate(ops):
            if op.name not in VIEW_OPS:
                continue
            users = self.users(op)
            if not users or not all(u.name in STEP_OF_IR and u in where for u in users):
                continue
            first = min(where[u] for u in users)
            last = max((j for j in range(i + 1, first) if ops[j].name in STEP_OF_IR), default=None)
            if last is not None:
                later.setdefault(last, []).append(op)
                moved.add(i)
        return _moved(ops, later, moved)

    def segment(self, ops: list) -> list:
        """Collectives, and the op lists of the kernels between them (long ones cut: `cut.py`)."""
        items, current = [], list[Any]()
        for op in ops:
            if op.name in STEP_OF_IR:
                if current:
                    items += cut(current)
                    current = []
                items.append(op)
            else:
                current.append(op)
        if current:
            items += cut(current)
        return items

    def collective(self, op: ir.Operation) -> CollectiveNode:
        """The node of one collective op: the step its class (`STEP_OF_IR`) reads from the op's attributes."""
        result = op.results[0]
        after = self.op_dist(op, result)
        grid = ir.FlatSymbolRefAttr(op.attributes[GRID_ATTR]).value if GRID_ATTR in op.attributes else None
        # Sub-axes: the op's grid may refine the mesh's (its `slicer.axes` name the parts, e.g. y:(2)2).
        names = (self.grids.get(grid) if grid is not None else None) or self.mesh.axis_names
        step = STEP_OF_IR[op.name].from_ir(op.name, _OpReader(op, self.mesh, names, grid), after)
        source = op.operands[0]
        if self.name_of(source) not in self.values:
            raise KernelGraphError(f"'{op.name}' consumes a value no earlier node produces")
        return CollectiveNode(step.op, step, self.name_of(source), self.record(result, after))

    def kernel(self, ops: list, name: str) -> KernelNode | None:
        inside = {r for op in ops for r in op.results}
        live_in, remat, seen = [], [], set()

        def need(value: ir.Value) -> None:
            if value in seen or value in inside:
                return
            seen.add(value)
            owner = defining_op(value)
            if owner is not None and _rematerialisable(owner):
                for operand in owner.operands:
                    need(operand)
                for deep in nested_ops(owner):  # what its body reads from the function (a constant)
                    for operand in deep.operands:
                        if operand in self.position:
                            need(operand)
                if owner not in remat:
                    remat.append(owner)
                return
            if isinstance(value.type, ir.RankedTensorType):
                live_in.append(value)
                return
            what = f"'{owner.name}'" if owner is not None else "a block argument"
            raise KernelGraphError(f"@{self.name}: a value of type {value.type} defined by {what} crosses a "
                                   "collective; only tensors and re-materialisable scalars can")

        for op in ops:
            for deep in walk_ops(op):
                for operand in deep.operands:
                    if operand in self.position or (isinstance(operand.owner, ir.Block)
                                                    and operand.owner == self.block):
                        need(operand)
        kernel_ops = set(ops)
        outputs = []
        for op in ops:
            for result in op.results:
                if not isinstance(result.type, ir.RankedTensorType):
                    continue
                users = [self.top_level(as_op(u.owner)) for u in result.uses]
                if _rematerialisable(op) and not any(u.name in STEP_OF_IR or u.name == _RETURN for u in users):
                    continue  # recomputed by the kernels that use it
                if any(u not in kernel_ops or (_recomputed_from_source(u) and self.viewed_elsewhere(u, kernel_ops))
                       for u in users):
                    outputs.append(result)
        if not outputs:
            return None
        remat.sort(key=lambda o: self.position[o.results[0]])
        needs_coords = any(o.name == MULTI_INDEX for o in list(remat) + ops)
        self.emit(name, live_in, outputs, remat + ops, needs_coords)
        for value in outputs:
            self.record(value, self.op_dist(as_op(value.owner), value))
        return KernelNode(name, tuple(self.name_of(v) for v in live_in), tuple(self.name_of(v) for v in outputs),
                          needs_coords)

    def viewed_elsewhere(self, view: ir.Operation, kernel_ops: set) -> bool:
        """Whether a kernel other than the one of `kernel_ops` (where the view op `view` is) applies `view` again:
        it is read outside them other than by a collective or the return (which take the view itself), directly
        or through further views. Its source is then that kernel's input, so an output here."""
        for result in view.results:
            for use in result.uses:
                user = self.top_level(as_op(use.owner))
                if user.name in STEP_OF_IR or user.name == _RETURN:
                    continue
                if user not in kernel_ops or (_recomputed_from_source(user)
                                              and self.viewed_elsewhere(user, kernel_ops)):
                    return True
        return False

    def top_level(self, op: ir.Operation) -> ir.Operation:
        while as_op(op.parent) != self.func:
            op = as_op(op.parent)
        return op

    def emit(self, name: str, live_in: list, outputs: list, ops: list, needs_coords: bool) -> None:
        coords_type = ir.RankedTensorType.get([self.mesh.ndim], ir.IntegerType.get_signless(64))
        inputs = [v.type for v in live_in] + ([coords_type] if needs_coords else [])
        fn_type = ir.FunctionType.get(inputs, [v.type for v in outputs])
        with ir.InsertionPoint(self.kernels.body):
            kernel = func.FuncOp(name, fn_type)
        block = kernel.regions[0].blocks.append(*inputs)
        mapping = dict(zip(live_in, block.arguments))
        coords = block.arguments[-1] if needs_coords else None
        with ir.InsertionPoint(block):
            for op in ops:
                if op.name == MULTI_INDEX:
                    axes = list(op.opview.axes) or list(range(self.mesh.ndim))  # none: all
                    for result, axis in zip(op.results, axes):
                        raw = tensor.extract(coords, [arith.constant(ir.IndexType.get(), axis)])
                        mapping[result] = arith.index_cast(ir.IndexType.get(), raw)
                    continue
                clone = op.clone()
                for deep in walk_ops(clone):
                    for i, operand in enumerate(deep.operands):
                        if operand in mapping:
                            deep.operands[i] = mapping[operand]
                for old, new in zip(op.results, clone.results):
                    mapping[old] = new
            ir.Operation.create(_RETURN, operands=[mapping[v] for v in outputs])
