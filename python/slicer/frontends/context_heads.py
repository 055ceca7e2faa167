"""Attention tiled by heads around a context-parallel axis: DeepSpeed-Ulysses (`strategies.context_parallel(...,
method="all_to_all")`, docs/tactics.md "Context parallelism").

Between attention blocks the activations are tiled over the sequence; attention itself needs every key of a
query's head, so around it the tiling moves from the sequence to the heads and back. In the imported program
(after the import's cleanup) attention is the ops that read or make a *score* value: a tensor of rank >= 3
whose last two dims are the sequence length S (`[B, H, S, S]`: the scores, the softmax, their gradients). Such
an op's score operand names the loops: dim -3 walks the heads, dims -2 and -1 the sequence. Then:

- every other operand of those ops that walks the heads loop (q, k^T, v forward; the output's gradient, the
  backward's q and k) is read through a `slicer.annotate` tiling its heads dim over the axis: the partitioner
  moves it from sequence-tiled to head-tiled, one all_to_all each, and each device computes attention for its
  heads over the whole sequence;
- every other result (the output forward; the gradients of q, k and v backward) is read by the ops outside
  attention through a `slicer.annotate` tiling its sequence dim: one all_to_all back each.

A value the annotations reach once is moved once (one annotate per value, shared by its readers). Masks
without a heads dim ([S, S] causal, [B, 1, 1, S] padding) are left to propagation. The number of heads must
be divisible by the axis' devices (`HeadsNotDivisible`, a TacticError, says what to change).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from mlir import ir

from slicer.core.errors import CompileError
from slicer.core.functions import entry_function, function_type
from slicer.core.linalg_facts import indexing_maps, is_linalg_op, loop_dim
from slicer.core.mesh import Mesh
from slicer.dialect import Sharding, annotate, find_meshes, make_context
from slicer.dialect import mesh as mesh_op
from slicer.tactics import Tile

from .program import ImportedProgram


@dataclass
class _Attention:
    """The ops of attention (they read or make a score value) and, per op, its heads loop and sequence loops."""

    ops: list[ir.Operation]
    heads: dict[int, int]  # the op's position in `ops` -> its heads loop
    sequence: dict[int, frozenset[int]]  # -> its sequence loops
    batch: dict[int, int | None]  # -> its batch loop (the score's dim -4), if any


def _is_score(value: ir.Value, length: int) -> bool:
    if not isinstance(value.type, ir.RankedTensorType):
        return False
    shape = ir.RankedTensorType(value.type).shape
    return len(shape) >= 3 and shape[-1] == shape[-2] == length


def _attention(func: ir.Operation, length: int) -> _Attention:
    """The top-level linalg ops of `func` that read or make a score value (module docstring)."""
    found = _Attention([], {}, {}, {})
    for op in func.regions[0].blocks[0].operations:
        op = op.operation
        if not is_linalg_op(op):
            continue
        values = list(op.operands) + list(op.results)
        maps = indexing_maps(op)
        maps = maps + maps[len(maps) - len(op.results):]  # results walk as their inits
        # a score value walking three loops on its last dims (a mask [B, 1, S, S] broadcast over heads does not)
        score = next((m for v, m in zip(values, maps) if _is_score(v, length)
                      and None not in [loop_dim(e) for e in m.results[-3:]]), None)
        if score is None:
            continue
        dims = [d for e in score.results[-3:] if (d := loop_dim(e)) is not None]
        found.batch[len(found.ops)] = loop_dim(score.results[-4]) if len(score.results) >= 4 else None
        found.heads[len(found.ops)] = dims[0]
        found.sequence[len(found.ops)] = frozenset(dims[1:])
        found.ops.append(op)
    return found


AxesByDim = dict[int, tuple[str, ...]]
"""Mesh axes by tensor dim (or by loop dim)."""


def _axes_by_dim(amap: ir.AffineMap, loops: AxesByDim) -> AxesByDim:
    """{dim: axes} of a value walked by `amap`, for the loops `loops` tiles."""
    return {j: loops[d] for j, e in enumerate(amap.results) if (d := loop_dim(e)) in loops and loops[d]}


def heads_around_attention(step: ImportedProgram, mesh: Mesh, axes: tuple[str, ...], tactics: Sequence,
                           label: str) -> ImportedProgram:
    """`step` with its attention read and left through head and sequence annotations over `axes` (module
    docstring). The sequence length is that of the first argument dim `tactics` tile over `axes`; `label`
    names the tactic in errors."""
    devices = 1
    for axis in axes:
        devices *= mesh.size(axis)
    with make_context():
        module = ir.Module.parse(step.text)
        func = entry_function(module, step.entry)
        length, batch_axes = _sequence(step, func, axes, tactics, label)
        found = _attention(func, length)
        if not found.ops:
            raise CompileError(f"{label}: {step.source} has no attention over its sequence of {length}: no op reads "
                               f"or makes a [.., heads, {length}, {length}] value of scores; method='all_to_all' "
                               "moves attention's inputs to heads, so the sequence must be what attention runs over")
        name = _mesh_symbol(module, mesh, label)
        _annotate(found, name, axes, batch_axes, devices, label)
        text = module.operation.get_asm(enable_debug_info=True)
    return replace(step, text=text)


def _sequence(step: ImportedProgram, func: ir.Operation, axes: tuple[str, ...], tactics: Sequence,
              label: str) -> tuple[int, tuple[str, ...]]:
    """The sequence length (of the first argument dim a `Tile` of `tactics` tiles over `axes`) and the axes
    tiling that argument's dim 0, the batch (data parallelism on other axes), when the sequence is not dim 0."""
    inputs = function_type(func).inputs
    tiles = [t for t in tactics if isinstance(t, Tile) and t.arg is not None]
    for tactic in tiles:
        position = tactic.arg if isinstance(tactic.arg, int) else (
            step.arg_names.index(tactic.arg) if tactic.arg in step.arg_names else None)
        if tuple(tactic.axes) != axes or position is None or position >= len(inputs):
            continue
        shape = ir.RankedTensorType(inputs[position]).shape
        if tactic.dim < len(shape):
            batch = next((tuple(t.axes) for t in tiles if t.arg == tactic.arg and t.dim == 0 and tactic.dim), ())
            return shape[tactic.dim], batch
    raise CompileError(f"{label}: no argument is tiled over {', '.join(axes)}: give the sequence's tiles with it "
                       "(slicer.strategies.context_parallel returns them)")


def _mesh_symbol(module: ir.Module, mesh: Mesh, label: str) -> str:
    """The symbol of the module's mesh of `mesh`'s shape (declared first when the module has none)."""
    declared = find_meshes(module.operation)
    for symbol, op in declared.items():
        if op.mesh() == mesh:
            return symbol
    if declared:
        raise CompileError(f"{label}: the program declares meshes {', '.join('@' + s for s in declared)} but none "
                           f"is {mesh}; compile it on a declared mesh")
    body = module.body
    first = body.operations[0] if len(body.operations) else None
    mesh_op("mesh", mesh, loc=ir.Location.unknown(),
            ip=ir.InsertionPoint(first) if first is not None else ir.InsertionPoint(body))
    return "mesh"


def _producer(value: ir.Value) -> ir.Operation | None:
    return None if isinstance(value, ir.BlockArgument) else value.owner.operation


def _plan(found: _Attention, axes: tuple[str, ...], batch_axes: tuple[str, ...], devices: int,
          label: str) -> tuple[dict, dict]:
    """What to annotate, read before the IR changes (an op's hash changes with its operands): {value: ({dim:
    axes}, [(reader, operand)])} for the inputs (heads tiled), then for the outputs (sequence tiled); the batch
    dim keeps `batch_axes` in both."""
    inside = set(found.ops)
    inputs: dict[ir.Value, tuple[AxesByDim, list]] = {}
    outputs: dict[ir.Value, tuple[AxesByDim, list]] = {}
    for index, op in enumerate(found.ops):
        maps = indexing_maps(op)
        first_result = len(maps) - len(op.results)
        for position in range(first_result):
            value = op.operands[position]
            if _producer(value) in inside or not isinstance(value.type, ir.RankedTensorType):
                continue
            dims = [j for j, e in enumerate(maps[position].results) if loop_dim(e) == found.heads[index]]
            if len(dims) != 1:
                continue
            loops: AxesByDim = {found.heads[index]: axes}
            if (batch := found.batch[index]) is not None:
                loops[batch] = batch_axes
            tiled = _axes_by_dim(maps[position], loops)
            heads = ir.RankedTensorType(value.type).shape[dims[0]]
            if heads % devices:
                raise CompileError(f"{label}: attention has {heads} heads, which the {devices} devices of "
                                   f"{' x '.join(axes)} do not divide (each device computes whole heads); give the "
                                   f"model a number of heads divisible by {devices}, context_parallel an axis "
                                   "whose size divides the heads, or method='ring'")
            inputs.setdefault(value, (tiled, []))[1].append((op, position))
        for number, result in enumerate(op.results):
            readers = [(use.owner.operation, use.operand_number) for use in result.uses
                       if use.owner.operation not in inside]
            dims = [j for j, e in enumerate(maps[first_result + number].results)
                    if loop_dim(e) in found.sequence[index]]
            if readers and len(dims) == 1:
                amap = maps[first_result + number]
                loops = {d: axes for d in found.sequence[index]}
                if (batch := found.batch[index]) is not None:
                    loops[batch] = batch_axes
                outputs[result] = (_axes_by_dim(amap, loops), readers)
    return inputs, outputs


def _sharding(mesh: str, value: ir.Value, tiled: AxesByDim) -> Sharding:
    return Sharding(mesh, tuple(tiled.get(d, ()) for d in range(ir.RankedTensorType(value.type).rank)))


def _annotate(found: _Attention, mesh: str, axes: tuple[str, ...], batch_axes: tuple[str, ...], devices: int,
              label: str) -> int:
    """Read the inputs of attention tiled by heads and its outputs tiled by the sequence (module docstring);
    returns how many values are moved."""
    inputs, outputs = _plan(found, axes, batch_axes, devices, label)
    for value, (tiled, readers) in inputs.items():
        first = readers[0][0]
        moved = annotate(value, _sharding(mesh, value, tiled), loc=first.location, ip=ir.InsertionPoint(first))
        for reader, position in readers:
            reader.operands[position] = moved
    for value, (tiled, readers) in outputs.items():
        owner = value.owner.operation
        moved = annotate(value, _sharding(mesh, value, tiled), loc=owner.location, ip=ir.InsertionPoint.after(owner))
        for reader, position in readers:
            reader.operands[position] = moved
    return len(inputs) + len(outputs)
