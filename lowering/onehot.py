"""Contractions with a one-hot factor as scatters (`slicer-kernel-onehot`).

An indexed accumulation reaches the kernels as a contraction one of whose factors is a 0/1 mask computed in
the body: the embedding's gradient `onehot^T @ grad` (frontends/decompositions.py) once fusion has put the
comparison into the contraction's body, the ids compared with either a tensor of them or the loop index
(`linalg.index`) itself:

    C[m, n] += uitofp(idx[k] == ids[m] and ...) * g[k, n]

Details: docs/module-notes.md, `lowering/onehot.py`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from math import prod
from typing import Any

from mlir import ir
from mlir.dialects import arith, linalg

from slicer.core.linalg_facts import (
    REDUCTION,
    combined_with,
    in_body,
    indexing_maps,
    input_count,
    iterator_kinds,
    projected_dims,
)
from slicer.core.operations import walk_ops

from .body import emit_op, is_elementwise
from .emitter import Emitter, GeneratedFunctions, call_instead

log = logging.getLogger("slicer.kernels")

CMPI_EQ = 0
"""`arith.cmpi`'s predicate `eq` (arith::CmpIPredicate)."""

MIN_WORK_PER_HIT = 16
"""The least product of the other dims' extents (the body's work where the mask holds) for which the rewrite
pays: below it the comparisons cost about what the GEMM's lanes did."""

_INDEX = linalg.IndexOp.OPERATION_NAME


@dataclass
class Operand:
    """A memref operand of the generic: its value, type and the loop dim of each of its dims."""

    value: ir.Value
    type: ir.MemRefType
    dims: tuple[int, ...]


@dataclass
class OneHot:
    """A generic `out + product` whose factor `mask` (`uitofp` of an i1 value) selects the points that add
    anything, with what the generated scatter needs."""

    op: ir.Operation
    inputs: list[Operand]
    output: Operand
    ranges: list[int]
    captured: list[ir.Value]  # values from outside the body used by it (passed as arguments)
    mask_ops: list[ir.Operation]  # the body ops computing the mask factor, in program order
    mask_dims: list[int]  # the loop dims the mask reads: reduction dims first, then parallel ones
    rest_dims: list[int]  # the others


def _index_dim(op: ir.Operation) -> int:
    return ir.IntegerAttr(op.opview.dim).value


def _operands(op: ir.Operation) -> tuple[list[Operand], list[int]] | None:
    """The generic's operands (static memrefs indexed by plain loop dims) and its loop ranges, or None."""
    operands, ranges = [], dict[Any, Any]()
    for value, amap in zip(op.operands, indexing_maps(op)):
        dims = projected_dims(amap)
        if not isinstance(value.type, ir.MemRefType) or dims is None or not ir.MemRefType(value.type).has_static_shape:
            return None
        type_ = ir.MemRefType(value.type)
        operands.append(Operand(value, type_, dims))
        ranges.update(zip(dims, type_.shape))
    kinds = iterator_kinds(op)
    if sorted(ranges) != list(range(len(kinds))):
        return None
    return operands, [ranges[d] for d in range(len(kinds))]


def _product(block: ir.Block) -> ir.Value | None:
    """The `product` of a body yielding `out + product`, or None."""
    yielded = list(block.operations)[-1].operands
    found = combined_with(yielded[0], block.arguments[len(block.arguments) - 1]) if len(yielded) == 1 else None
    return found[1] if found is not None and found[0].name == arith.AddFOp.OPERATION_NAME else None


def _factors(product: ir.Value, block: ir.Block) -> list[ir.Value]:
    """The leaves of the multiplication tree of `product` inside the body."""
    factors, stack = [], [product]
    while stack:
        value = stack.pop()
        owner = None if isinstance(value, ir.BlockArgument) or not in_body(value, block) else value.owner
        if owner is not None and owner.name == arith.MulFOp.OPERATION_NAME:
            stack.extend(owner.operands)
        else:
            factors.append(value)
    return factors


def _value_dims(value: ir.Value, inputs: list[Operand], block: ir.Block, ops: set, dims: set) -> None:
    """Add to `dims` the loop dims `value` changes with, to `ops` the body ops computing it."""
    if isinstance(value, ir.BlockArgument) and value.owner == block:
        if value.arg_number < len(inputs):
            dims.update(inputs[value.arg_number].dims)
        return
    if not in_body(value, block):
        return  # a captured value: the same at every point
    owner = value.owner
    if owner in ops:
        return
    ops.add(owner)
    if owner.name == _INDEX:
        dims.add(_index_dim(owner))
    for operand in owner.operands:
        _value_dims(operand, inputs, block, ops, dims)


def _dims_of(value: ir.Value, inputs: list[Operand], block: ir.Block) -> set[int]:
    dims: set[int] = set()
    _value_dims(value, inputs, block, set(), dims)
    return dims


def _selects_one_hot(mask: ir.Value, inputs: list[Operand], block: ir.Block, kinds: list[str]) -> bool:
    """Whether the i1 `mask` is (a conjunction holding) `a == b` with `a` changing with reduction dims only and
    `b` with parallel dims only (or the other way round)."""
    stack = [mask]
    while stack:
        value = stack.pop()
        if isinstance(value, ir.BlockArgument) or not in_body(value, block):
            continue
        owner = value.owner
        if owner.name == arith.AndIOp.OPERATION_NAME:
            stack.extend(owner.operands)
        elif owner.name == arith.CmpIOp.OPERATION_NAME and ir.IntegerAttr(owner.opview.predicate).value == CMPI_EQ:
            sides = [_dims_of(v, inputs, block) for v in owner.operands]
            if all(sides) and not sides[0] & sides[1]:
                side_kinds = [{kinds[d] for d in side} for side in sides]
                if len(side_kinds[0]) == 1 and len(side_kinds[1]) == 1 and side_kinds[0] != side_kinds[1]:
                    return True
    return False


def _captured(block: ir.Block) -> list[ir.Value] | None:
    """The values from outside the body its ops use, or None when an op is not one the scatter re-emits."""
    captured: list[ir.Value] = []
    for body_op in list(block.operations)[:-1]:
        if not (is_elementwise(body_op) or body_op.name == _INDEX):
            return None
        for operand in body_op.operands:
            if not in_body(operand, block) and operand not in captured:
                captured.append(operand)
    return captured


def find_one_hot(op: ir.Operation) -> OneHot | None:
    """The one-hot structure of a bufferized generic (see the module docstring), or None."""
    op = op.operation
    kinds = iterator_kinds(op)
    if REDUCTION not in kinds or len(op.operands) - input_count(op) != 1:
        return None
    found = _operands(op)
    block = op.regions[0].blocks[0]
    product = _product(block)
    captured = _captured(block)
    if found is None or product is None or captured is None:
        return None
    (*inputs, output), ranges = found
    if sorted(output.dims) != [d for d, k in enumerate(kinds) if k != REDUCTION]:
        return None
    for factor in _factors(product, block):
        if isinstance(factor, ir.BlockArgument) or not in_body(factor, block):
            continue
        owner = factor.owner
        if owner.name == arith.ExtFOp.OPERATION_NAME and in_body(owner.operands[0], block) and \
                not isinstance(owner.operands[0], ir.BlockArgument):
            owner = owner.operands[0].owner  # the 0/1 of a bf16 mask (mixed precision), widened: exact
        if owner.name != arith.UIToFPOp.OPERATION_NAME or not _selects_one_hot(owner.operands[0], inputs, block, kinds):
            continue
        ops: set = set()
        dims: set[int] = set()
        _value_dims(factor, inputs, block, ops, dims)
        accumulator = block.arguments[len(block.arguments) - 1]
        if any(operand == accumulator for o in ops for operand in o.operands):
            continue  # a mask reading the sum so far is no selection of points
        rest = [d for d in range(len(kinds)) if d not in dims]
        if not rest or prod(ranges[d] for d in rest) < MIN_WORK_PER_HIT:
            continue
        ordered = sorted(dims, key=lambda d: (kinds[d] != REDUCTION, d))
        return OneHot(op, inputs, output, ranges, captured, [o for o in block.operations if o in ops], ordered, rest)
    return None


def scatter_text(found: OneHot, name: str) -> str:
    """The generated function of one masked contraction: its inputs, its output, the captured values."""
    block = found.op.regions[0].blocks[0]
    e = Emitter("s")
    args = [f"%in{i}" for i in range(len(found.inputs))]
    caps = [f"%cap{i}" for i in range(len(found.captured))]
    out_arg = block.arguments[len(block.arguments) - 1]

    def emit(ops: list, env: dict, point: dict) -> None:
        for body_op in ops:
            for operand in body_op.operands:
                if isinstance(operand, ir.BlockArgument) and operand.owner == block and operand not in env:
                    access = found.inputs[operand.arg_number]
                    indices = e.indices(point[d] for d in access.dims)
                    env[operand] = e.value(f"memref.load {args[operand.arg_number]}[{indices}] : {access.type}", "l")
            result = body_op.results[0]
            is_index = body_op.name == _INDEX
            env[result] = e.idx(point[_index_dim(body_op)]) if is_index else emit_op(e, body_op, env, None)

    def nest(dims: list[int], point: dict, inner) -> None:
        if not dims:
            inner(point)
            return
        with e.loop(0, found.ranges[dims[0]]) as iv:
            nest(dims[1:], {**point, dims[0]: iv}, inner)

    def accumulate(point: dict, outer_env: dict) -> None:
        env, out = dict(outer_env), found.output
        indices = e.indices(point[d] for d in out.dims)
        env[out_arg] = e.value(f"memref.load %out[{indices}] : {out.type}", "c")
        emit([o for o in list(block.operations)[:-1] if o.results[0] not in env], env, point)
        e.line(f"memref.store {env[list(block.operations)[-1].operands[0]]}, %out[{indices}] : {out.type}")

    # Each mask op is computed in the outermost loop where every dim it reads is bound (a token's id once per
    # token, not once per (token, vocabulary entry)): LLVM cannot hoist the loads itself, the output's stores
    # in the loop may alias them for all it knows.
    needs = [_dims_of(o.results[0], found.inputs, block) for o in found.mask_ops]
    selecting = next(o for o in reversed(found.mask_ops) if o.name == arith.UIToFPOp.OPERATION_NAME)  # (its i1)

    def mask_nest(level: int, point: dict, env: dict) -> None:
        emit([o for o, dims in zip(found.mask_ops, needs) if dims <= set(point) and o.results[0] not in env], env,
             point)
        if level < len(found.mask_dims):
            dim = found.mask_dims[level]
            with e.loop(0, found.ranges[dim]) as iv:
                mask_nest(level + 1, {**point, dim: iv}, dict(env))
            return
        with e.if_(env[selecting.operands[0]]):
            nest(found.rest_dims, point, lambda full: accumulate(full, env))

    mask_nest(0, {}, dict(zip(found.captured, caps)))
    inputs = ", ".join(f"{a}: {access.type}" for a, access in zip(args, found.inputs))
    captured = "".join(f", {n}: {v.type}" for n, v in zip(caps, found.captured))
    head = f"func.func private @{name}({inputs}, %out: {found.output.type}{captured}) {{"
    return "\n".join([head, e.body(), "  return", "}"])


def onehot_module(module: ir.Module) -> list[str]:
    """Replace every masked contraction of `module` (see the module docstring) by a call to its generated
    scatter; one line per replaced op."""
    functions = GeneratedFunctions("__slicer_onehot_")
    calls = []
    for op in walk_ops(module, linalg.GenericOp.OPERATION_NAME):
        found = find_one_hot(op)
        if found is not None:
            calls.append((op, found, functions.name_of(scatter_text(found, GeneratedFunctions.SELF))))
    if not calls:
        return []
    functions.add_to(module)
    replaced = []
    for op, found, name in calls:
        call_instead(op, name, [a.value for a in found.inputs] + [found.output.value] + list(found.captured))
        replaced.append(f"@{name}: scatter over dims {found.mask_dims}, then {found.rest_dims} where the mask holds")
        log.debug("one-hot contraction as a scatter: %s", replaced[-1])
    return replaced
