"""Lowering slicer loops to upstream loops (`lower_loops`, the pass `slicer-lower-to-loops`): give
`slicer.loop`/`slicer.slice` their sequential meaning.

Each `slicer.loop` over a range of size k becomes an `scf.for` from 0 to k whose
iteration arguments accumulate the results:
- `tile<d>`: start from `tensor.empty`, `tensor.insert_slice` block i at offset
  i * (block size along d);
- `sum`: start from zeros (`linalg.fill`), `linalg.add` each block.
Each `slicer.slice(t, d, r)` of the loop's range becomes `tensor.extract_slice`
at offset i * (block size along d). `slicer.annotate` is the identity and is
dropped; `slicer.mesh` declarations stay (they are inert). Loops are lowered
outermost first so a slice deep inside nested loops sees its loop's induction
variable. The result is upstream MLIR only, runnable by the JIT.

Uneven dims (docs/partition.md, "Uneven shapes"): a slice of a dim of n rows into k blocks of c = ceil(n/k)
pads the source with zeros to k*c first; a tile loop assembling such blocks accumulates k*c rows and keeps
the first n; a reduction in the body over a padded block ignores its padding as the SPMD program does
(`slicer.spmd.padding`: the same masks, with the loop's induction variable as the block index).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, linalg, scf, tensor

from slicer.core.errors import Located, PassFailure, Unsupported
from slicer.core.linalg_facts import is_linalg_op
from slicer.core.names import ANNOTATE, LOOP, SLICE
from slicer.dialect import LoopOp, SliceOp, SumAction, TileAction, split_product_slices, walk_ops
from slicer.spmd.padding import Pad, pad_with_zeros, pads_through, trim


def lower_loops(module: ir.Operation) -> None:
    """Lower every slicer loop, slice and annotation of `module` in place (raises PassFailure on a slice whose
    range is not an enclosing loop's)."""
    split_product_slices(module)  # slices by product ranges become nested slices
    for op in walk_ops(module, ANNOTATE):
        op.results[0].replace_all_uses_with(op.operands[0])
        op.erase()
    for op in walk_ops(module, LOOP):
        lower_loop(LoopOp(op))
    leftover = list(walk_ops(module, SLICE))
    if leftover:
        raise PassFailure([Located(op.location, "'slicer.slice' whose range is not the argument of an enclosing "
                                                "slicer.loop cannot be lowered to loops") for op in leftover])


def _index(value: int) -> ir.Value:
    return arith.constant(ir.IndexType.get(), value)


def _zero(element_type: ir.Type) -> ir.Value:
    if isinstance(element_type, ir.FloatType):
        return arith.constant(element_type, 0.0)
    return arith.constant(element_type, 0)


def lower_loop(loop: LoopOp) -> None:
    op = loop.operation
    action, rng = loop.action, loop.range
    if action is None or rng is None:
        raise PassFailure(Located(op.location, "malformed 'slicer.loop' (run slicer-verify for details)"))
    with ir.InsertionPoint(op), op.location:
        inits = []
        for result, block in zip(loop.results, loop.terminator.operands):
            rtype = ir.RankedTensorType(result.type)
            shape = list(rtype.shape)
            if isinstance(action, TileAction):  # uneven: k padded blocks, trimmed after the loop
                shape[action.dim] = ir.RankedTensorType(block.type).shape[action.dim] * rng.size
            empty = tensor.empty(shape, rtype.element_type)
            inits.append(linalg.fill(_zero(rtype.element_type),
                                     outs=[empty]) if isinstance(action, SumAction) else empty)
        for_op = scf.ForOp(_index(0), _index(rng.size), _index(1), inits)
    iv = for_op.induction_variable
    with ir.InsertionPoint(for_op.body), op.location:
        placeholder = scf.YieldOp([])
    body_ops = [o.operation for o in loop.body.operations]
    terminator, body_ops = body_ops[-1], body_ops[:-1]
    for body_op in body_ops:
        body_op.move_before(placeholder)
    pads = _lower_slices_of(loop.range_arg, iv)
    _mask_reductions(for_op, placeholder, pads, iv)
    with ir.InsertionPoint(placeholder), terminator.location:
        updated = []
        for acc, block in zip(for_op.inner_iter_args, terminator.operands):
            if isinstance(action, TileAction):
                updated.append(_insert_block(block, acc, action.dim, iv))
            else:
                updated.append(linalg.add(acc, block, outs=[acc]))
        scf.YieldOp(updated)
    placeholder.erase()
    for old, new in zip(loop.results, for_op.results):
        size = ir.RankedTensorType(old.type).shape[action.dim] if isinstance(action, TileAction) else None
        if size is not None and size != ir.RankedTensorType(new.type).shape[action.dim]:
            with ir.InsertionPoint(op), op.location:
                new = trim(new, action.dim, size)
        old.replace_all_uses_with(new)
    op.erase()


def _mask_reductions(for_op, end: ir.Operation, pads: dict, iv: ir.Value) -> None:
    """Follow the padded blocks the slices cut (`pads`: value -> {dim: Pad}) through the body's linalg ops
    and mask the reductions over them (block index: the induction variable)."""
    for body_op in list(for_op.body.operations):
        body_op = body_op.operation
        if body_op == end:
            break
        operand_pads = {i: pads[v] for i, v in enumerate(body_op.operands) if v in pads}
        if not operand_pads or not is_linalg_op(body_op):
            continue
        try:
            found = pads_through(body_op, operand_pads, lambda axes: iv, lambda made: None)
        except Unsupported as exc:
            raise PassFailure(Located(body_op.location,
                                      f"'{body_op.name}' cannot compute on padded blocks: {exc}")) from None
        pads.update({r: p for r, p in zip(body_op.results, found) if p})


def _offset(iv: ir.Value, block_size: int) -> ir.Value:
    return arith.muli(iv, _index(block_size))


def _insert_block(block: ir.Value, dest: ir.Value, dim: int, iv: ir.Value) -> ir.Value:
    btype = ir.RankedTensorType(block.type)
    dynamic = ir.ShapedType.get_dynamic_size()
    static_offsets = [dynamic if d == dim else 0 for d in range(btype.rank)]
    return tensor.insert_slice(
        block, dest, [_offset(iv, btype.shape[dim])], [], [],
        static_offsets, list(btype.shape), [1] * btype.rank,
    )


def _lower_slices_of(range_arg: ir.Value, iv: ir.Value) -> dict:
    """Each slice by the loop's range as a `tensor.extract_slice`; returns the padded blocks they cut (value ->
    {dim: Pad})."""
    pads: dict = {}
    users = [use.owner for use in range_arg.uses]
    for user in users:
        user = user.operation
        if user.name != SLICE:
            raise PassFailure(Located(user.location, f"'{user.name}' uses a !slicer.range; only 'slicer.slice' may"))
        view = SliceOp(user)
        rtype = ir.RankedTensorType(view.result.type)
        dynamic = ir.ShapedType.get_dynamic_size()
        static_offsets = [dynamic if d == view.dim else 0 for d in range(rtype.rank)]
        size, block = ir.RankedTensorType(view.source.type).shape[view.dim], rtype.shape[view.dim]
        count = view.range.size
        with ir.InsertionPoint(user), user.location:
            source = view.source
            if size != block * count:  # uneven: padded blocks of the source padded with zeros
                source = pad_with_zeros(source, view.dim, block * count)[-1]
            extracted = tensor.extract_slice(
                rtype, source, [_offset(iv, block)], [], [],
                static_offsets, list(rtype.shape), [1] * rtype.rank,
            )
        if size != block * count:
            pads[extracted] = {view.dim: Pad(size, block, tuple(view.range.axes))}
        view.result.replace_all_uses_with(extracted)
        user.erase()
    return pads
