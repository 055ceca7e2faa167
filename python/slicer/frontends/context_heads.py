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
be divisible by the axis' devices (else a CompileError says what to change).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from mlir import ir

from slicer.core.errors import CompileError
from slicer.core.functions import entry_function, function_type
from slicer.core.linalg_facts import indexing_maps, is_linalg_op, loop_dim, reshape_kept_dims
from slicer.core.mesh import Mesh
from slicer.core.names import CONTEXT_TO_HEADS_LOC, CONTEXT_TO_SEQUENCE_LOC
from slicer.core.operations import defining_op
from slicer.dialect import Sharding, annotate, find_meshes, make_context
from slicer.dialect import mesh as mesh_op
from slicer.tactics import Tile
from slicer.tactics.requests import NEW_MESH_NAME

from .program import ImportedProgram


@dataclass
class _Attention:
    """The ops of attention (they read or make a score value) and, per op, its heads loop and sequence loops."""

    ops: list[ir.Operation]
    heads: dict[int, int]  # the op's position in `ops` -> its heads loop
    sequence: dict[int, frozenset[int]]  # -> its sequence loops
    batch: dict[int, int | None]  # -> its batch loop (the score's dim -4), if any
    length: int  # of the sequence


def _score_loops(value: ir.Value, amap: ir.AffineMap) -> list[int | None]:
    """The loops of the score's dims of extent > 1, major to minor: the sequence's two last, the heads before
    them, the batch (if any) before the heads."""
    return [loop_dim(amap.results[j]) for j in _wide_dims(value)]


def _size(value: ir.Value) -> int:
    return math.prod(ir.RankedTensorType(value.type).shape)


def _wide_dims(value: ir.Value) -> list[int]:
    """The dims of `value` of extent > 1 (the import leaves unit dims anywhere: [H, S, 1, 1, 1, S] scores)."""
    return [j for j, size in enumerate(ir.RankedTensorType(value.type).shape) if size > 1]


def _is_score(value: ir.Value, length: int) -> bool:
    """Whether `value` is a block of scores: its last two dims of extent > 1 are the sequence, after a third."""
    if not isinstance(value.type, ir.RankedTensorType) or not ir.RankedTensorType(value.type).has_static_shape:
        return False
    shape, wide = ir.RankedTensorType(value.type).shape, _wide_dims(value)
    return len(wide) >= 3 and shape[wide[-1]] == shape[wide[-2]] == length


def _attention(func: ir.Operation, length: int) -> _Attention:
    """The top-level linalg ops of `func` that read or make a score value (module docstring)."""
    found = _Attention([], {}, {}, {}, length)
    for op in func.regions[0].blocks[0].operations:
        op = op.operation
        if not is_linalg_op(op):
            continue
        values = list(op.operands) + list(op.results)
        maps = indexing_maps(op)
        maps = maps + maps[len(maps) - len(op.results):]  # results walk as their inits
        # the largest score value walking loops on its dims (not a mask [1, 1, S, S] read broadcast)
        scores = [(v, m) for v, m in zip(values, maps) if _is_score(v, length) and None not in _score_loops(v, m)]
        if not scores:
            continue
        loops = [d for d in _score_loops(*max(scores, key=lambda pair: _size(pair[0]))) if d is not None]
        found.heads[len(found.ops)] = loops[-3]
        found.batch[len(found.ops)] = loops[-4] if len(loops) > 3 else None
        found.sequence[len(found.ops)] = frozenset(loops[-2:])
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
    mesh_op(NEW_MESH_NAME, mesh, loc=ir.Location.unknown(), ip=ir.InsertionPoint.at_block_begin(module.body))
    return NEW_MESH_NAME


def _through_reshapes(value: ir.Value, tiled: AxesByDim) -> tuple[ir.Value, AxesByDim, tuple]:
    """`value` traced back through the reshapes that leave its tiled dims alone: (source, its tiled dims, the
    reshapes from it to `value`, first to last). Two views of one value (k^T as [H, E, S] in the backward and
    as [H, E, 1, 1, 1, S] in the forward) then move once."""
    chain: list[ir.Operation] = []
    while (op := defining_op(value)) is not None and (kept := reshape_kept_dims(op)) is not None:
        back = {result: operand for operand, result in kept.items()}
        if not all(d in back for d in tiled):
            break
        tiled = {back[d]: axes for d, axes in tiled.items()}
        chain.insert(0, op)
        value = op.operands[0]
    return value, tiled, tuple(chain)


def _plan_inputs(found: _Attention, axes: tuple[str, ...], batch_axes: tuple[str, ...], devices: int,
                 label: str) -> dict:
    """{source: ({dim: axes}, [(reader, operand, reshapes)])}: each operand made outside attention that walks an
    attention op's heads loop, traced to the source it is a view of, and its readers (module docstring)."""
    inside = set(found.ops)
    inputs: dict[ir.Value, tuple[AxesByDim, list]] = {}
    for index, op in enumerate(found.ops):
        maps = indexing_maps(op)
        for position in range(len(maps) - len(op.results)):
            value = op.operands[position]
            if (defining_op(value) in inside or not isinstance(value.type, ir.RankedTensorType)
                    or _is_score(value, found.length)):
                continue
            dims = [j for j, e in enumerate(maps[position].results) if loop_dim(e) == found.heads[index]]
            if len(dims) != 1:
                continue
            heads = ir.RankedTensorType(value.type).shape[dims[0]]
            if heads % devices:
                raise CompileError(f"{label}: attention has {heads} heads, which the {devices} devices of "
                                   f"{' x '.join(axes)} do not divide (each device computes whole heads); give the "
                                   f"model a number of heads divisible by {devices}, context_parallel an axis "
                                   "whose size divides the heads, or method='ring'")
            loops: AxesByDim = {found.heads[index]: axes}
            if (batch := found.batch[index]) is not None:
                loops[batch] = batch_axes
            source, tiled, chain = _through_reshapes(value, _axes_by_dim(maps[position], loops))
            inputs.setdefault(source, (tiled, []))[1].append((op, position, chain))
    return inputs


def _plan_outputs(found: _Attention, axes: tuple[str, ...], batch_axes: tuple[str, ...]) -> dict:
    """{result: ({dim: axes}, [(reader, operand)])}: each result of an attention op read outside attention, and
    those readers."""
    inside = set(found.ops)
    outputs: dict[ir.Value, tuple[AxesByDim, list]] = {}
    for index, op in enumerate(found.ops):
        maps = indexing_maps(op)
        first_result = len(maps) - len(op.results)
        for number, result in enumerate(op.results):
            readers = [(use.owner.operation, use.operand_number) for use in result.uses
                       if use.owner.operation not in inside]
            amap = maps[first_result + number]
            if not readers or len([e for e in amap.results if loop_dim(e) in found.sequence[index]]) != 1:
                continue
            loops = {d: axes for d in found.sequence[index]}
            if (batch := found.batch[index]) is not None:
                loops[batch] = batch_axes
            outputs[result] = (_axes_by_dim(amap, loops), readers)
    return outputs


def _view(views: dict[tuple, ir.Value], chain: tuple, point: ir.InsertionPoint) -> ir.Value:
    """The moved value seen through the reshapes `chain` (each made once, from the moved source, at `point`)."""
    if chain not in views:
        source = _view(views, chain[:-1], point)
        view = chain[-1].clone(ip=point)
        view.operands[0] = source
        views[chain] = view.results[0]
    return views[chain]


def _sharding(mesh: str, value: ir.Value, tiled: AxesByDim) -> Sharding:
    return Sharding(mesh, tuple(tiled.get(d, ()) for d in range(ir.RankedTensorType(value.type).rank)))


def _annotate(found: _Attention, mesh: str, axes: tuple[str, ...], batch_axes: tuple[str, ...], devices: int,
              label: str) -> int:
    """Read the inputs of attention tiled by heads and its outputs tiled by the sequence (module docstring);
    returns how many values are moved."""
    # read before the IR changes: an op's hash changes with its operands
    inputs = _plan_inputs(found, axes, batch_axes, devices, label)
    outputs = _plan_outputs(found, axes, batch_axes)
    for value, (tiled, readers) in inputs.items():
        point = ir.InsertionPoint(readers[0][0])
        where = ir.Location.name(CONTEXT_TO_HEADS_LOC, childLoc=readers[0][0].location)
        moved = annotate(value, _sharding(mesh, value, tiled), loc=where, ip=point)
        views: dict[tuple, ir.Value] = {(): moved}
        for reader, position, chain in readers:
            reader.operands[position] = _view(views, chain, point)
    for value, (tiled, readers) in outputs.items():
        owner = value.owner.operation
        where = ir.Location.name(CONTEXT_TO_SEQUENCE_LOC, childLoc=owner.location)
        moved = annotate(value, _sharding(mesh, value, tiled), loc=where, ip=ir.InsertionPoint.after(owner))
        for reader, position in readers:
            reader.operands[position] = moved
    return len(inputs) + len(outputs)
