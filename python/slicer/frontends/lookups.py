"""Lookups by data kept apart: a `linalg.generic` that reads a table at token ids and computes with the
element (elementwise fusion's `wte(idx) + wpe(pos)`) split into the lookup and the rest.

Vocabulary parallelism tiles an embedding table along its gathered dim only where the lookup is an op of its
own, yielding the element as it is (`rules/gathers.py`: each device's masked lookup yields 0 off its range,
and the blocks add up to the lookup). torch-mlir imports the lookup so, but upstream elementwise fusion
(`cleanup.py`, step 3) merges it into its consumer: GPT-2's `wte(idx) + wpe(pos)` becomes one op reading two
tables, whose blocks would add `wpe(pos)` once per device; propagation then gathered the whole table on
every device. `split_lookups` takes each read back out: a lookup op over the same loops (the inputs its
position is computed from, its bounds checks), whose result the rest of the op reads as one more input.
Upstream has no inverse of the fusion; the rewrite is a few lines of op building.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import cf, linalg, tensor

from slicer.core.linalg_facts import PARALLEL, indexing_maps, input_count, is_linalg_op, iterator_kinds
from slicer.core.names import INDEXING_MAPS_ATTR, ITERATOR_TYPES_ATTR
from slicer.core.operations import clone_mapped
from slicer.dialect import walk_ops
from slicer.rules.gathers import lookups_by_data


def split_lookups(module: ir.Operation) -> int:
    """Split every fused lookup by data of `module` (see the module docstring); how many lookups were split."""
    split = 0
    for op in walk_ops(module, linalg.GenericOp.OPERATION_NAME):
        while (read := _fused_lookup(op)) is not None:
            op = _split(op, read)
            split += 1
    return split


def _fused_lookup(op: ir.Operation) -> ir.Operation | None:
    """The first lookup by data of `op` when `op` does more than look up (and can be split: one output written
    at every point of its parallel loops, a body without regions), else None."""
    if not is_linalg_op(op) or len(op.results) != 1 or any(k != PARALLEL for k in iterator_kinds(op)):
        return None
    maps = indexing_maps(op)
    if maps[-1] != ir.AffineMap.get_identity(maps[-1].n_dims):
        return None
    if not ir.RankedTensorType(op.results[0].type).has_static_shape:
        return None
    body = op.regions[0].blocks[0]
    if any(len(inner.operation.regions) for inner in body.operations):
        return None
    reads, alone = lookups_by_data(op)
    return reads[0] if reads and not alone else None


def _position_ops(read: ir.Operation) -> list[ir.Operation]:
    """The body ops `read`'s position is computed by and the bounds checks on it (comparisons of the
    position that only `cf.assert`s read, and those asserts), in body order."""
    body = read.block
    needed = _computing(body, list(read.operands)[1:])
    positions = [r for op in needed for r in op.results] + [
        v for op in needed + [read] for v in op.operands if isinstance(v, ir.BlockArgument)]
    ops = [o.operation for o in body.operations]
    for inner in ops:
        if inner.name != cf.AssertOp.OPERATION_NAME or isinstance(inner.operands[0], ir.BlockArgument):
            continue
        check = inner.operands[0].owner.operation
        inside = [v for v in check.operands if isinstance(v, ir.BlockArgument) or v.owner.operation in ops]
        if check in ops and inside and all(any(v == p for p in positions) for v in inside):
            needed += [check, inner]
    return [o for o in ops if o in needed]


def _computing(body: ir.Block, values: list, leaf: ir.Operation | None = None) -> list[ir.Operation]:
    """The ops of `body` that `values` are computed by, transitively, not looking past `leaf` (ir.Block has no
    equality: membership is tested among its ops)."""
    ops = [o.operation for o in body.operations]
    found: list[ir.Operation] = []
    stack = list(values)
    while stack:
        value = stack.pop()
        if isinstance(value, ir.BlockArgument):
            continue
        owner = value.owner.operation
        if owner in ops and owner not in found:
            found.append(owner)
            stack.extend(owner.operands if leaf is None or owner != leaf else [])
    return found


def _split(op: ir.Operation, read: ir.Operation) -> ir.Operation:
    """Replace `op` by a lookup op for `read` and `op` reading the lookup's result as its last input; returns
    the new `op`."""
    count = input_count(op)
    maps = list(ir.ArrayAttr(op.attributes[INDEXING_MAPS_ATTR]))
    iterators = op.attributes[ITERATOR_TYPES_ATTR]
    body = op.regions[0].blocks[0]
    args = list(body.arguments)
    moved = _position_ops(read)
    used = [i for i in range(count) if any(any(v == args[i] for v in m.operands) for m in moved + [read])]
    shape = list(ir.RankedTensorType(op.results[0].type).shape)
    element = read.results[0].type
    identity = ir.AffineMapAttr.get(ir.AffineMap.get_identity(len(shape)))
    with ir.InsertionPoint(op), op.location:
        lookup_type = ir.RankedTensorType.get(shape, element)
        lookup = linalg.GenericOp([lookup_type], [op.operands[i] for i in used], [tensor.empty(shape, element)],
                                  ir.ArrayAttr.get([maps[i] for i in used] + [identity]), iterators)
        block = lookup.regions[0].blocks.append(*[args[i].type for i in used], element)
        mapping = {args[i]: block.arguments[k] for k, i in enumerate(used)}
        with ir.InsertionPoint(block):
            for inner in moved + [read]:
                clone_mapped(inner, mapping)
            linalg.YieldOp([mapping[read.results[0]]])
        checks = [m for m in moved if m.name == cf.AssertOp.OPERATION_NAME]
        ops = [o.operation for o in body.operations]
        kept = [o for o in ops if o.name == cf.AssertOp.OPERATION_NAME and o not in checks]
        live = _computing(body, list(ops[-1].operands) + [v for o in kept for v in o.operands], read)
        live += kept + [ops[-1]]
        live = [o for o in ops if o in live and o != read]
        reads = [i for i in range(count) if any(any(v == args[i] for v in o.operands) for o in live)]
        outputs = list(op.operands)[count:]
        rest = linalg.GenericOp(list(op.results.types), [op.operands[i] for i in reads] + [lookup.results[0]],
                                outputs, ir.ArrayAttr.get([maps[i] for i in reads] + [identity] + maps[count:]),
                                iterators)
        block = rest.regions[0].blocks.append(*[args[i].type for i in reads], element,
                                              *[a.type for a in args[count:]])
        new_args = list(block.arguments)
        mapping = {args[i]: new_args[k] for k, i in enumerate(reads)}
        mapping |= {old: new for old, new in zip(args[count:], new_args[len(reads) + 1:])}
        mapping[read.results[0]] = new_args[len(reads)]
        with ir.InsertionPoint(block):
            for inner in live:
                clone_mapped(inner, mapping)
    op.results[0].replace_all_uses_with(rest.results[0])
    op.erase()
    return rest.operation


__all__ = ["split_lookups"]
