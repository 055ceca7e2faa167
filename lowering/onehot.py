"""Contractions with a one-hot factor as scatters (`slicer-kernel-onehot`).

An indexed accumulation reaches the kernels as a contraction one of whose factors is a 0/1 mask computed in
the body: the embedding's gradient `onehot^T @ grad` (frontends/decompositions.py), and `index_add`,
`scatter_add`, `F.one_hot(...) @ x` (decomp_indexing.py) once fusion has put the comparison into the
contraction's body:

    C[m, n] += uitofp(idx[k] == ids[m] and ...) * g[k, n]

As a packed GEMM it costs M*N*K multiply-adds, all but N*K of them adding 0 (GPT-2's embedding gradient:
50257 x 768 x 256 per rank, as much as its LM head's matmul). This pass rewrites such a bufferized generic
into loops over the dims the mask reads (reduction dims outermost), its ops evaluated once per point, and,
only where it holds, loops over the other dims computing the body as it is (`out + 1.0 * g`). Each point
the GEMM visits where the mask is 0 adds `0 * g`, which is +-0 (or NaN where g is not finite: the scatter,
like torch's, does not spread a NaN of one row into every row), so the sums are those of the same terms.

A factor is a mask when it is `arith.uitofp` of an i1 value; the rewrite applies when that value compares
for equality (`arith.cmpi eq`, possibly under `arith.andi`) something that changes with a reduction dim
only against something that changes with a parallel dim only (a one-hot: each k hits few m), and the dims
the mask does not read hold enough work per hit to pay for the comparisons.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from math import prod

from mlir import ir
from mlir.dialects import arith
from mlir.dialects import func as func_d
from mlir.dialects import linalg

from slicer.core.errors import NotAContraction
from slicer.core.linalg_facts import REDUCTION, in_body, iterator_kinds
from slicer.dialect.ops import walk_ops

from .body import emit_op
from .contract.analysis import Contraction, analyze
from .emitter import Emitter, GeneratedFunctions

log = logging.getLogger("slicer.kernels")

CMPI_EQ = 0
"""`arith.cmpi`'s predicate `eq` (arith::CmpIPredicate)."""

MIN_WORK_PER_HIT = 16
"""The least product of the other dims' extents (the body's work where the mask holds) for which the rewrite
pays: below it the comparisons cost about what the GEMM's lanes did."""


@dataclass
class OneHot:
    """A contraction whose factor `mask` (`uitofp` of an i1 value) selects the points that add anything."""

    contraction: Contraction
    mask_ops: list[ir.Operation]  # the body ops computing the mask factor, in program order
    mask_dims: list[int]  # the loop dims the mask reads: reduction dims first, then parallel ones
    rest_dims: list[int]  # the others


def _value_dims(value: ir.Value, c: Contraction, block: ir.Block, ops: set, dims: set) -> None:
    """Add to `dims` the loop dims `value` changes with, to `ops` the body ops computing it."""
    if isinstance(value, ir.BlockArgument) and value.owner == block:
        dims.update(c.inputs[value.arg_number].dims)
        return
    if not in_body(value, block):
        return  # a captured value: the same at every point
    owner = value.owner
    if owner in ops:
        return
    ops.add(owner)
    for operand in owner.operands:
        _value_dims(operand, c, block, ops, dims)


def _dims_of(value: ir.Value, c: Contraction, block: ir.Block) -> set[int]:
    dims: set[int] = set()
    _value_dims(value, c, block, set(), dims)
    return dims


def _selects_one_hot(mask: ir.Value, c: Contraction, block: ir.Block, kinds: list[str]) -> bool:
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
            sides = [_dims_of(v, c, block) for v in owner.operands]
            if all(sides) and not sides[0] & sides[1]:
                side_kinds = [{kinds[d] for d in side} for side in sides]
                if len(side_kinds[0]) == 1 and len(side_kinds[1]) == 1 and side_kinds[0] != side_kinds[1]:
                    return True
    return False


def find_one_hot(op: ir.Operation) -> OneHot | None:
    """The one-hot structure of a bufferized generic, or None (not a contraction, no mask factor, or too
    little work per hit for the rewrite to pay)."""
    try:
        c = analyze(op)
    except NotAContraction:
        return None
    block = op.regions[0].blocks[0]
    kinds = iterator_kinds(op)
    for factor in c.a.factors + c.b.factors:
        if isinstance(factor, ir.BlockArgument) or not in_body(factor, block):
            continue
        owner = factor.owner
        if owner.name != arith.UIToFPOp.OPERATION_NAME or not _selects_one_hot(owner.operands[0], c, block, kinds):
            continue
        ops: set = set()
        dims: set[int] = set()
        _value_dims(factor, c, block, ops, dims)
        rest = [d for d in range(len(kinds)) if d not in dims]
        if not rest or prod(c.ranges[d] for d in rest) < MIN_WORK_PER_HIT:
            continue
        ordered = sorted(dims, key=lambda d: (kinds[d] != REDUCTION, d))
        return OneHot(c, [o for o in block.operations if o in ops], ordered, rest)
    return None


def scatter_text(found: OneHot, name: str) -> str:
    """The generated function of one masked contraction: inputs, output, captured values, in `analyze`'s
    order (the packed GEMM's calling convention)."""
    c = found.contraction
    block = c.op.regions[0].blocks[0]
    e = Emitter("s")
    args = [f"%in{i}" for i in range(len(c.inputs))]
    caps = [f"%cap{i}" for i in range(len(c.captured))]
    out_arg = block.arguments[len(block.arguments) - 1]
    base = {value: name for value, name in zip(c.captured, caps)}

    def load(env: dict, point: dict, index: int) -> str:
        access = c.inputs[index]
        indices = e.indices(point[d] for d in access.dims)
        return e.value(f"memref.load {args[index]}[{indices}] : {access.type_text}", "l")

    def emit(ops: list, env: dict, point: dict) -> None:
        for body_op in ops:
            for operand in body_op.operands:
                if isinstance(operand, ir.BlockArgument) and operand.owner == block and operand not in env \
                        and operand != out_arg:
                    env[operand] = load(env, point, operand.arg_number)
            env[body_op.results[0]] = emit_op(e, body_op, env, None)

    def nest(dims: list[int], point: dict, inner) -> None:
        if not dims:
            inner(point)
            return
        with e.loop(0, c.ranges[dims[0]]) as iv:
            nest(dims[1:], {**point, dims[0]: iv}, inner)

    body_ops = [o for o in block.operations if o.name != linalg.YieldOp.OPERATION_NAME]
    yielded = list(block.operations)[-1].operands[0]

    # Each mask op is computed in the outermost loop where every dim it reads is bound (the token's id once
    # per token, not once per (token, vocabulary entry)): LLVM cannot hoist the loads itself, the output's
    # stores in the loop may alias them for all it knows.
    needs = [_dims_of(o.results[0], c, block) for o in found.mask_ops]

    def mask_nest(level: int, point: dict, env: dict) -> None:
        ready = [o for o, dims in zip(found.mask_ops, needs) if dims <= set(point) and o.results[0] not in env]
        emit(ready, env, point)
        if level < len(found.mask_dims):
            dim = found.mask_dims[level]
            with e.loop(0, c.ranges[dim]) as iv:
                mask_nest(level + 1, {**point, dim: iv}, dict(env))
            return
        mask = found.mask_ops[-1].results[0]
        with e.if_(env[mask.owner.operands[0]]):
            nest(found.rest_dims, point, lambda full: accumulate(full, env))

    def accumulate(point: dict, outer_env: dict) -> None:
        env = dict(outer_env)
        out = c.output
        indices = e.indices(point[d] for d in out.dims)
        env[out_arg] = e.value(f"memref.load %out[{indices}] : {out.type_text}", "c")
        emit([o for o in body_ops if o.results[0] not in env], env, point)
        e.line(f"memref.store {env[yielded]}, %out[{indices}] : {out.type_text}")

    mask_nest(0, {}, dict(base))
    inputs = ", ".join(f"{a}: {access.type_text}" for a, access in zip(args, c.inputs))
    captured = "".join(f", {n}: {v.type}" for n, v in zip(caps, c.captured))
    head = f"func.func private @{name}({inputs}, %out: {c.output.type_text}{captured}) {{"
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
    generated = ir.Module.parse("\n".join(functions.texts()), module.context)
    for fn in list(generated.body.operations):
        module.body.append(fn.operation)
    replaced = []
    for op, found, name in calls:
        c = found.contraction
        with ir.InsertionPoint(op), op.location:
            func_d.CallOp([], ir.FlatSymbolRefAttr.get(name), [a.value for a in c.inputs] + [c.output.value] +
                          list(c.captured))
        op.erase()
        replaced.append(f"@{name}: scatter over dims {found.mask_dims}, then {found.rest_dims} where the mask holds")
        log.debug("one-hot contraction as a scatter: %s", replaced[-1])
    return replaced
