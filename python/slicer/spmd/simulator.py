"""In-process SPMD simulator: run a partitioned function for every device of the mesh in one process.

The test oracle of `slicer-partition` (and a debugging mode once the MPI launcher exists). The SPMD function
is cut at its collectives into maximal collective-free *segments*. Each segment becomes one small kernel
`func.func` (its live-in tensors as arguments, the device coordinate as a `tensor<n x i64>` argument that
replaces `shard.process_multi_index`, scalars such as constants re-materialised, its live-out tensors as
results) compiled **once** by the JIT (`slicer.lowering`) and called once per device. Collectives run in numpy
on the list of device blocks with the step semantics of `slicer.redistribution.simulate.run_step` (the same
reference that checks the synthesizer's plans and the MPI executor). Inputs are laid out from global arrays
with the arguments' `slicer.dist` types, results are assembled from the results' types (checking that all
replicas of a block agree, and summing partial results).

    program = SpmdProgram(partitioned_module)          # compiles the kernels
    outputs = program(*global_inputs)                  # numpy in, numpy out (tuple for several results)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from mlir import ir
from mlir.dialects import arith, tensor

from slicer.dialect import make_context
from slicer.dialect.collectives import PERMUTE, PermuteOp
from slicer.lowering import compile_function
from slicer.redistribution import (AllGather, AllReduce, AllSlice, AllToAll, DistType, Mesh, Permute, ReduceScatter,
                                  parse_spec)
from slicer.redistribution.layout import Layout
from slicer.redistribution.simulate import block_slices, groups, initial_blocks, run_step

from .dist_types import DIST_ATTR, MESH_ATTR
from .emit import COLLECTIVE_OPS

MULTI_INDEX = "shard.process_multi_index"


class SimulationError(RuntimeError):
    """The SPMD function cannot be simulated, or its devices disagree (says which op / result)."""


def parse_dist_text(text: str, local_shape: tuple[int, ...], mesh: Mesh) -> DistType:
    """A `slicer.dist` string (`varying=[...]` dropped) with the global shape recovered from the local one."""
    spec = text.split(" varying=")[0]
    dims, partial = parse_spec(spec)
    shape = tuple(n * mesh.group_size(d) for n, d in zip(local_shape, dims))
    return DistType.of(mesh, shape, dims, partial)


def _op(x) -> ir.Operation:
    return x.operation if isinstance(x, ir.OpView) else x


def _deep_ops(op: ir.Operation):
    yield op
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                yield from _deep_ops(_op(inner))


@dataclass
class _Kernel:
    """One collective-free segment compiled as a function of its live-in tensors and the device coordinate."""

    ops: list
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    needs_coords: bool = False
    compiled: object = None


class SpmdProgram:
    """A partitioned function, its kernels compiled, callable on global numpy arrays."""

    def __init__(self, module, entry: str | None = None):
        text = module if isinstance(module, str) else str(module)
        self._context = make_context()
        with self._context, ir.Location.unknown():
            self._module = ir.Module.parse(text)
            self.func = _find_function(self._module, entry)
            self.name = ir.StringAttr(self.func.attributes["sym_name"]).value
            if MESH_ATTR not in self.func.attributes:
                raise SimulationError(f"@{self.name} has no '{MESH_ATTR}' attribute: run slicer-partition first")
            self.mesh = Mesh.parse(ir.StringAttr(self.func.attributes[MESH_ATTR]).value)
            self.block = self.func.regions[0].blocks[0]
            self.arg_types = [self._func_dist("arg_attrs", i, a.type) for i, a in enumerate(self.block.arguments)]
            ops = [_op(o) for o in self.block.operations]
            self.ret = ops[-1]
            self.result_types = [self._func_dist("res_attrs", i, v.type) for i, v in enumerate(self.ret.operands)]
            self.position = {}
            for index, op in enumerate(ops):
                for result in op.results:
                    self.position[result] = index
            self.items = self._segment(ops[:-1])
            for item in self.items:
                if isinstance(item, _Kernel):
                    self._compile(item)

    # -- construction --------------------------------------------------------------------------------------
    def _func_dist(self, attr: str, index: int, type_: ir.Type) -> DistType:
        dicts = ir.ArrayAttr(self.func.attributes[attr]) if attr in self.func.attributes else None
        entry = ir.DictAttr(dicts[index]) if dicts is not None else None
        if entry is None or DIST_ATTR not in entry:
            raise SimulationError(f"{attr[:3]} #{index} of @{self.name} has no '{DIST_ATTR}' type")
        return parse_dist_text(ir.StringAttr(entry[DIST_ATTR]).value, tuple(ir.RankedTensorType(type_).shape),
                               self.mesh)

    def _segment(self, ops: list) -> list:
        items, current = [], []
        for op in ops:
            if op.name in COLLECTIVE_OPS:
                if current:
                    items.append(_Kernel(current))
                    current = []
                items.append(op)
            else:
                current.append(op)
        if current:
            items.append(_Kernel(current))
        return items

    def _compile(self, kernel: _Kernel) -> None:
        inside = set()
        for op in kernel.ops:
            for r in op.results:
                inside.add(r)
        live_in, remat = [], []
        seen = set()

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
            raise SimulationError(f"@{self.name}: a value of type {value.type} defined by {what} crosses a "
                                  "collective; only tensors and re-materialisable scalars can")

        for op in kernel.ops:
            for deep in _deep_ops(op):
                for operand in deep.operands:
                    if operand in self.position or isinstance(operand.owner, ir.Block) and operand.owner == self.block:
                        need(operand)
        kernel.inputs = live_in
        outputs = []
        kernel_ops = set(kernel.ops)
        for op in kernel.ops:
            for result in op.results:
                if not isinstance(result.type, ir.RankedTensorType):
                    continue
                if _rematerialisable(op) and not any(
                        _top_level(_op(u.owner), self.func).name in COLLECTIVE_OPS + ("func.return",)
                        for u in result.uses):
                    continue  # recomputed by the kernels that use it
                if any(_top_level(_op(u.owner), self.func) not in kernel_ops for u in result.uses):
                    outputs.append(result)
        kernel.outputs = outputs
        if not outputs:
            return
        remat.sort(key=lambda o: self.position[o.results[0]])
        kernel.needs_coords = any(o.name == MULTI_INDEX for o in list(remat) + kernel.ops)
        kernel.compiled = compile_function(self._kernel_module(kernel, remat))

    def _kernel_module(self, kernel: _Kernel, remat: list) -> str:
        module = ir.Module.create()
        coords_type = ir.RankedTensorType.get([self.mesh.ndim], ir.IntegerType.get_signless(64))
        inputs = [v.type for v in kernel.inputs] + ([coords_type] if kernel.needs_coords else [])
        fn_type = ir.FunctionType.get(inputs, [v.type for v in kernel.outputs])
        with ir.InsertionPoint(module.body):
            func = ir.Operation.create("func.func", attributes={"sym_name": ir.StringAttr.get("kernel"),
                                                                 "function_type": ir.TypeAttr.get(fn_type)},
                                       regions=1)
        block = func.regions[0].blocks.append(*inputs)
        mapping = dict(zip(kernel.inputs, block.arguments))
        coords = block.arguments[-1] if kernel.needs_coords else None
        with ir.InsertionPoint(block):
            for op in remat + kernel.ops:
                if op.name == MULTI_INDEX:
                    axes = list(ir.DenseI16ArrayAttr(op.attributes["axes"])) if "axes" in op.attributes else \
                        list(range(self.mesh.ndim))
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
            ir.Operation.create("func.return", operands=[mapping[v] for v in kernel.outputs])
        return str(module)

    # -- execution -----------------------------------------------------------------------------------------
    def __call__(self, *arrays: np.ndarray):
        if len(arrays) != len(self.arg_types):
            raise SimulationError(f"@{self.name} takes {len(self.arg_types)} arrays, got {len(arrays)}")
        n = self.mesh.device_count
        env: dict = {}
        for arg, t, array in zip(self.block.arguments, self.arg_types, arrays):
            env[arg] = initial_blocks(self.mesh, t, np.asarray(array))
        for item in self.items:
            if isinstance(item, _Kernel):
                if item.compiled is None:
                    continue
                per_device = []
                for rank in range(n):
                    args = [env[v][rank] for v in item.inputs]
                    if item.needs_coords:
                        args.append(np.asarray(self.mesh.coords(rank), dtype=np.int64))
                    out = item.compiled(*args)
                    per_device.append(out if isinstance(out, tuple) else (out,))
                for index, value in enumerate(item.outputs):
                    env[value] = [per_device[rank][index] for rank in range(n)]
            else:
                env[item.results[0]] = self._collective(item, env[item.operands[0]])
        outputs = [self._assemble(t, env[v], i) for i, (t, v) in enumerate(zip(self.result_types, self.ret.operands))]
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _collective(self, op: ir.Operation, blocks: list) -> list:
        local = tuple(ir.RankedTensorType(op.results[0].type).shape)
        after = parse_dist_text(ir.StringAttr(ir.ArrayAttr(op.attributes[DIST_ATTR])[0]).value, local, self.mesh)
        names = self.mesh.axis_names
        axes = tuple(names[i] for i in ir.DenseI16ArrayAttr(op.attributes["grid_axes"])) \
            if "grid_axes" in op.attributes else ()

        def index(name: str) -> int:
            return ir.IntegerAttr(op.attributes[name]).value

        if op.name == "shard.all_gather":
            step = AllGather(index("gather_axis"), axes, after)
        elif op.name == "shard.all_to_all":
            step = AllToAll(index("split_axis"), index("concat_axis"), axes, after)
        elif op.name == "shard.all_reduce":
            kind = str(op.attributes["reduction"]) if "reduction" in op.attributes else "#shard<partial sum>"
            if "sum" not in kind:
                raise SimulationError(f"'{op.name}' with reduction {kind}: only sums are simulated")
            step = AllReduce(axes, after)
        elif op.name == "shard.reduce_scatter":
            step = ReduceScatter(index("scatter_axis"), axes, after)
        elif op.name == "shard.all_slice":
            step = AllSlice(index("slice_axis"), axes, after)
        elif op.name == PERMUTE:
            step = Permute(PermuteOp(op).pairs, after)
        else:  # pragma: no cover - COLLECTIVE_OPS is exhaustive
            raise SimulationError(f"unknown collective '{op.name}'")
        out = run_step(Layout.get(self.mesh, after.shape), step, blocks)
        if any(b.shape != local for b in out):
            raise SimulationError(f"'{op.name}' produced blocks of shape {out[0].shape}, its result type says {local}")
        return out

    def _assemble(self, t: DistType, blocks: list, index: int) -> np.ndarray:
        layout = Layout.get(self.mesh, t.shape)
        if self.mesh.group_size(t.partial) > 1:
            reps = groups(layout, t.partial)
            blocks = list(blocks)
            for row in reps:
                total = np.sum([blocks[r] for r in row], axis=0, dtype=blocks[row[0]].dtype)
                for r in row:
                    blocks[r] = total
        out = np.empty(t.shape, blocks[0].dtype)
        filled = np.zeros(t.shape, bool)
        for rank in range(self.mesh.device_count):
            where = block_slices(layout, t, rank)
            if filled[where].all():
                if not np.array_equal(out[where], blocks[rank], equal_nan=True):
                    raise SimulationError(f"result #{index} of @{self.name}: device {rank} {self.mesh.coords(rank)} "
                                          f"holds a block that differs from another replica of it under {t}")
            out[where] = blocks[rank]
            filled[where] = True
        return out


_REMAT = ("tensor.empty", "arith.constant", "linalg.fill", MULTI_INDEX)


def _rematerialisable(op: ir.Operation) -> bool:
    """Cheap ops recomputed in every kernel that uses them instead of being passed between kernels:
    constants, `tensor.empty`, fills of constants, the device index and scalar `arith` on those."""
    if op.name in _REMAT:
        return True
    return op.name.startswith("arith.") and not op.regions and \
        not any(isinstance(r.type, ir.ShapedType) for r in op.results)


def _top_level(op: ir.Operation, func: ir.Operation) -> ir.Operation:
    """The ancestor of `op` (or `op`) that sits directly in `func`'s body."""
    while _op(op.parent) != func:
        op = _op(op.parent)
    return op


def _find_function(module: ir.Module, entry: str | None) -> ir.Operation:
    funcs = [_op(o) for o in module.body.operations if _op(o).name == "func.func" and len(_op(o).regions[0].blocks)]
    if entry is not None:
        funcs = [f for f in funcs if ir.StringAttr(f.attributes["sym_name"]).value == entry]
    if len(funcs) != 1:
        raise SimulationError(f"expected one function to simulate, found {len(funcs)}; name it with entry=")
    return funcs[0]


def simulate(module, *arrays: np.ndarray, entry: str | None = None):
    """Compile and run the SPMD function once on global arrays; returns the assembled global results."""
    return SpmdProgram(module, entry)(*arrays)
