"""Kernel extraction: an SPMD function cut at its collectives into a dataflow graph.

Nodes, in program order:
- `KernelNode`: a collective-free segment (a maximal one, unless long: `cut.py`), as one `func.func` (`kernel_<i>`)
  whose arguments are the tensors it needs (plus the device coordinate as a
  `tensor<n x i64>` when the segment uses `shard.process_multi_index`) and whose
  results are the tensors later nodes or the function's results use. Cheap values
  (constants, `tensor.empty`, fills of constants, the device index) are recomputed
  in each kernel instead of being passed around.
- `CollectiveNode`: one collective, as the redistribution step it performs
  (`slicer.redistribution` semantics, so the numpy simulator and the MPI executor
  share one definition).
Values are named `%<n>` (function arguments first). The graph serialises to JSON
(with all kernels in one MLIR module; `aot.compile_kernels` compiles and caches them one by one) and prints
readably (`slicer-opt --print-kernel-graph`). Both the in-process simulator
(`slicer.runtime.simulator`) and the MPI runtime (`slicer.runtime`) execute it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from mlir import ir
from mlir.dialects import arith, func, linalg, tensor
from mlir.dialects import shard  # noqa: F401  (registers the op views read below: op.opview.reduction, .axes)

import numpy as np

from slicer.core import dtypes
from slicer.core.errors import KernelGraphError
from slicer.core.functions import EntryError, entry_function, function_name
from slicer.core.names import (AXES_ATTR, COLLECTIVE_OPS, DIST_ATTR, DIST_SOURCE_ATTR, GRID, GRID_ATTR, MULTI_INDEX,
                               SPMD_MESH_ATTR)
from slicer.dialect import PermuteOp, make_context
from slicer.redistribution import AllReduce, DistType, Mesh, Permute, step_from_fields, subaxes
from slicer.redistribution.steps import STEP_OF_IR
from slicer.spmd.dist_types import parse_dist_text, varying_axes

from .cut import cut

_REMAT = (tensor.EmptyOp.OPERATION_NAME, arith.ConstantOp.OPERATION_NAME, linalg.FillOp.OPERATION_NAME, MULTI_INDEX)
_RETURN = func.ReturnOp.OPERATION_NAME


def location_text(location: ir.Location) -> str:
    """`file:line:col` of a plain file location (where a value is defined in the source), else ""."""
    return f"{location.filename}:{location.start_line}:{location.start_col}" if location.is_a_file() else ""


@dataclass(frozen=True)
class Value:
    """A tensor flowing between nodes: its name, local shape, dtype and distributed type. `varying`: the loop
    axes of a value computed in a loop body (devices that differ on them hold different members of the loop's
    family, so `dist` describes one member, see slicer.spmd.dist_types); `loc`: where the source defines it
    (`file:line:col`, "" when unknown, e.g. for collectives)."""

    name: str
    local_shape: tuple[int, ...]
    dtype: str
    dist: DistType
    varying: tuple[str, ...] = ()
    loc: str = ""

    @property
    def numpy_dtype(self) -> np.dtype:
        dtype = dtypes.numpy_dtype(self.dtype)
        if dtype is None:
            raise KernelGraphError(f"value {self.name}: {dtypes.unsupported(self.dtype)}")
        return dtype


@dataclass(frozen=True)
class KernelNode:
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    needs_coords: bool


@dataclass(frozen=True)
class CollectiveNode:
    op: str
    step: object  # a slicer.redistribution step (AllGather, ...), its type_after the result's type
    input: str
    output: str


@dataclass
class KernelGraph:
    entry: str
    mesh: Mesh
    values: dict[str, Value]
    args: tuple[str, ...]
    results: tuple[str, ...]
    result_sources: tuple[str, ...]  # "requested" or "default" per result
    result_dists: tuple[DistType, ...]  # the function's result types (what the blocks assemble into)
    nodes: list = field(default_factory=list)
    kernels_mlir: str = ""

    # -- building ----------------------------------------------------------------------------------------
    @staticmethod
    def from_spmd(module, entry: str | None = None) -> "KernelGraph":
        """Cut the SPMD function `entry` (default: the only one) of `module` (text or IR)."""
        text = module if isinstance(module, str) else str(module)
        with make_context(), ir.Location.unknown():
            return _Builder(ir.Module.parse(text), entry).build()

    # -- serialisation -----------------------------------------------------------------------------------
    def to_json(self) -> str:
        def value(v: Value) -> dict:
            return {"local_shape": list(v.local_shape), "dtype": v.dtype, "dist": str(v.dist), "shape": list(v.dist.shape),
                    "varying": list(v.varying), "loc": v.loc}

        def node(n) -> dict:
            if isinstance(n, KernelNode):
                return {"kind": "kernel", "name": n.name, "inputs": list(n.inputs), "outputs": list(n.outputs),
                        "needs_coords": n.needs_coords}
            return {"kind": "collective", "op": n.op, "fields": n.step.fields(), "input": n.input, "output": n.output}

        return json.dumps({
            "entry": self.entry, "mesh": str(self.mesh), "args": list(self.args), "results": list(self.results),
            "result_sources": list(self.result_sources),
            "result_dists": [[str(d), list(d.shape)] for d in self.result_dists],
            "values": {name: value(v) for name, v in self.values.items()},
            "nodes": [node(n) for n in self.nodes], "kernels_mlir": self.kernels_mlir,
        }, indent=1)

    @staticmethod
    def from_json(text: str) -> "KernelGraph":
        data = json.loads(text)
        mesh = Mesh.parse(data["mesh"])
        values = {}
        for name, v in data["values"].items():
            dist = DistType.parse(v["dist"], tuple(v["shape"]), mesh)
            values[name] = Value(name, tuple(v["local_shape"]), v["dtype"], dist, tuple(v.get("varying", ())),
                                 v.get("loc", ""))
        nodes = []
        for n in data["nodes"]:
            if n["kind"] == "kernel":
                nodes.append(KernelNode(n["name"], tuple(n["inputs"]), tuple(n["outputs"]), n["needs_coords"]))
            else:
                step = step_from_fields(n["op"], n["fields"], values[n["output"]].dist)
                nodes.append(CollectiveNode(n["op"], step, n["input"], n["output"]))
        result_dists = tuple(DistType.parse(text, tuple(shape), mesh) for text, shape in data["result_dists"])
        return KernelGraph(data["entry"], mesh, values, tuple(data["args"]), tuple(data["results"]),
                           tuple(data["result_sources"]), result_dists, nodes, data["kernels_mlir"])

    # -- memory ------------------------------------------------------------------------------------------
    def value_bytes(self, name: str) -> int:
        """Bytes of one device's block of value `name`."""
        v = self.values[name]
        return int(np.prod(v.local_shape, dtype=np.int64)) * v.numpy_dtype.itemsize

    def last_uses(self) -> dict[str, int]:
        """Per value, the index of the last node that reads it (results: `len(nodes)`, they stay to the end).
        Values no node reads and no result is are absent: they die where they are produced."""
        last_use = {name: len(self.nodes) for name in self.results}
        for index, node in enumerate(self.nodes):
            for name in ((node.input,) if isinstance(node, CollectiveNode) else node.inputs):
                last_use[name] = max(last_use.get(name, index), index)
        return last_use

    def live_bytes_per_node(self) -> list[tuple[str, int]]:
        """Bytes one device holds at the start (its argument blocks) and during each node, as
        `[("arguments", bytes), (node label, bytes), ...]`.

        A value is live from the node producing it (arguments: from the start) to its last use; results
        stay live to the end. A node's inputs and outputs are live together while it runs (a collective
        holds its input and output block). Scratch memory inside a kernel or a collective is not counted."""
        last_use = self.last_uses()
        live = {name: self.value_bytes(name) for name in self.args}
        timeline = [("arguments", sum(live.values()))]
        for index, node in enumerate(self.nodes):
            for name in ((node.output,) if isinstance(node, CollectiveNode) else node.outputs):
                live[name] = self.value_bytes(name)
            timeline.append((node.op if isinstance(node, CollectiveNode) else node.name, sum(live.values())))
            for name in [n for n in live if last_use.get(n, -1) <= index]:
                del live[name]
        return timeline

    def peak_bytes_per_device(self) -> tuple[int, str]:
        """The largest number of bytes a device holds at once between or during nodes, and when (the liveness
        count of `live_bytes_per_node`)."""
        timeline = self.live_bytes_per_node()
        index = max(range(len(timeline)), key=lambda i: (timeline[i][1], -i))
        return timeline[index][1], "at the start (arguments)" if index == 0 else f"during {timeline[index][0]}"

    def largest_value(self) -> tuple[str, int]:
        """The value with the largest per-device block, and its bytes."""
        name = max(self.values, key=self.value_bytes)
        return name, self.value_bytes(name)

    def __str__(self) -> str:
        lines = [f"kernel graph of @{self.entry} on mesh {self.mesh}"]
        for name in self.args:
            lines.append(f"  arg {name}: {self._describe(name)}")
        for n in self.nodes:
            if isinstance(n, KernelNode):
                coords = " + device coordinate" if n.needs_coords else ""
                lines.append(f"  kernel {n.name}({', '.join(n.inputs)}{coords}) -> {', '.join(n.outputs) or '()'}")
            else:
                lines.append(f"  {n.op} {n.input} -> {n.output}: {self._describe(n.output)}  {n.step.fields()}")
        for name, dist, source in zip(self.results, self.result_dists, self.result_sources):
            lines.append(f"  result {name}: {dist} ({source})")
        return "\n".join(lines)

    def _describe(self, name: str) -> str:
        v = self.values[name]
        return f"{v.dtype}{list(v.local_shape)} local of {list(v.dist.shape)} {v.dist}"


def _op(x) -> ir.Operation:
    return x.operation if isinstance(x, ir.OpView) else x


def _grid_axes(module: ir.Module) -> dict[str, tuple[str, ...]]:
    """Each `shard.grid` of ``module`` by symbol -> its axes (`slicer.axes`: axis names, or the sub-axes of a
    grid that refines the mesh's)."""
    out = {}
    for op in module.body.operations:
        op = _op(op)
        if op.name == GRID and AXES_ATTR in op.attributes:
            out[ir.SymbolTable.get_symbol_name(op).value] = tuple(
                ir.StringAttr(a).value for a in ir.ArrayAttr(op.attributes[AXES_ATTR]))
    return out


def _deep_ops(op: ir.Operation):
    yield op
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                yield from _deep_ops(_op(inner))


def _rematerialisable(op: ir.Operation) -> bool:
    """Cheap ops recomputed in every kernel that uses them instead of being passed between kernels:
    constants, `tensor.empty`, fills of constants, the device index and scalar `arith` on those."""
    if op.name in _REMAT:
        return True
    return op.name.startswith("arith.") and not op.regions and not any(isinstance(r.type, ir.ShapedType) for r in op.results)


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
        self.grids = _grid_axes(module)
        self.names: dict = {}
        self.values: dict[str, Value] = {}
        self.kernels = ir.Module.create()

    def name_of(self, value: ir.Value) -> str:
        if value not in self.names:
            self.names[value] = f"%{len(self.names)}"
        return self.names[value]

    def record(self, value: ir.Value, dist: DistType) -> str:
        name = self.name_of(value)
        t = ir.RankedTensorType(value.type)
        varying, loc = (), ""
        if isinstance(value.owner, ir.Block):
            loc = location_text(ir.BlockArgument(value).location)
        else:
            owner = _op(value.owner)
            loc = location_text(owner.location)
            if DIST_ATTR in owner.attributes:
                texts = ir.ArrayAttr(owner.attributes[DIST_ATTR])
                varying = varying_axes(ir.StringAttr(texts[ir.OpResult(value).result_number]).value)
        self.values[name] = Value(name, tuple(t.shape), str(t.element_type), dist, varying, loc)
        return name

    def func_dist(self, which: str, index: int, type_: ir.Type) -> tuple[DistType, str]:
        """The type of argument (``which="arg"``) or result (``"res"``) ``index`` of the function, and where
        it comes from ("requested" or "default")."""
        view = _op(self.func).opview
        dicts = view.arg_attrs if which == "arg" else view.res_attrs
        entry = ir.DictAttr(dicts[index]) if dicts is not None else None
        if entry is None or DIST_ATTR not in entry:
            raise KernelGraphError(f"{which} #{index} of @{self.name} has no '{DIST_ATTR}' type")
        source = ir.StringAttr(entry[DIST_SOURCE_ATTR]).value if DIST_SOURCE_ATTR in entry else "requested"
        return parse_dist_text(ir.StringAttr(entry[DIST_ATTR]).value, tuple(ir.RankedTensorType(type_).shape), self.mesh), source

    def op_dist(self, op: ir.Operation, result: ir.Value) -> DistType:
        if DIST_ATTR not in op.attributes:
            raise KernelGraphError(f"'{op.name}' has no '{DIST_ATTR}' type: run slicer-partition first")
        texts = ir.ArrayAttr(op.attributes[DIST_ATTR])
        return parse_dist_text(ir.StringAttr(texts[ir.OpResult(result).result_number]).value,
                               tuple(ir.RankedTensorType(result.type).shape), self.mesh)

    def build(self) -> KernelGraph:
        args = tuple(self.record(a, self.func_dist("arg", i, a.type)[0]) for i, a in enumerate(self.block.arguments))
        ops = [_op(o) for o in self.block.operations]
        ret = ops[-1]
        self.position = {r: i for i, op in enumerate(ops) for r in op.results}
        nodes = []
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
                           nodes, str(self.kernels))

    def segment(self, ops: list) -> list:
        """Collectives, and the op lists of the kernels between them (long ones cut: `cut.py`)."""
        items, current = [], []
        for op in ops:
            if op.name in COLLECTIVE_OPS:
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
        names = self.grids.get(grid) or self.mesh.axis_names

        def group(attr: str) -> tuple[str, ...]:
            if attr not in op.attributes:
                return ()
            indices = list(ir.DenseI16ArrayAttr(op.attributes[attr]))
            if any(not 0 <= i < len(names) for i in indices):
                raise KernelGraphError(f"'{op.name}' names grid axis {max(indices)} but @{grid} has {len(names)} axes")
            return subaxes.canonical(self.mesh, tuple(names[i] for i in indices))

        def dim(attr: str) -> int:
            return ir.IntegerAttr(op.attributes[attr]).value

        kind = STEP_OF_IR[op.name]
        if kind is Permute:
            step = Permute(PermuteOp(op).pairs, after)
        else:
            if kind is AllReduce:
                reduction = str(op.opview.reduction)
                if "sum" not in reduction:
                    raise KernelGraphError(f"'{op.name}' with reduction {reduction}: only sums are supported")
            step = kind.from_ir(op.name, dim, group, after)
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
            owner = None if isinstance(value.owner, ir.Block) else _op(value.owner)
            if owner is not None and _rematerialisable(owner):
                for operand in owner.operands:
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
            for deep in _deep_ops(op):
                for operand in deep.operands:
                    if operand in self.position or (isinstance(operand.owner, ir.Block) and operand.owner == self.block):
                        need(operand)
        kernel_ops = set(ops)
        outputs = []
        for op in ops:
            for result in op.results:
                if not isinstance(result.type, ir.RankedTensorType):
                    continue
                users = [self.top_level(_op(u.owner)) for u in result.uses]
                if _rematerialisable(op) and not any(u.name in COLLECTIVE_OPS + (_RETURN,) for u in users):
                    continue  # recomputed by the kernels that use it
                if any(u not in kernel_ops for u in users):
                    outputs.append(result)
        if not outputs:
            return None
        remat.sort(key=lambda o: self.position[o.results[0]])
        needs_coords = any(o.name == MULTI_INDEX for o in list(remat) + ops)
        self.emit(name, live_in, outputs, remat + ops, needs_coords)
        for value in outputs:
            self.record(value, self.op_dist(_op(value.owner), value))
        return KernelNode(name, tuple(self.name_of(v) for v in live_in), tuple(self.name_of(v) for v in outputs), needs_coords)

    def top_level(self, op: ir.Operation) -> ir.Operation:
        while _op(op.parent) != self.func:
            op = _op(op.parent)
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
                for deep in _deep_ops(_op(clone)):
                    for i, operand in enumerate(deep.operands):
                        if operand in mapping:
                            deep.operands[i] = mapping[operand]
                for old, new in zip(op.results, clone.results):
                    mapping[old] = new
            ir.Operation.create(_RETURN, operands=[mapping[v] for v in outputs])
