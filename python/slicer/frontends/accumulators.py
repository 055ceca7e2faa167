"""Sums over half-precision tensors accumulated in f32, as torch computes them.

torch reduces a bf16 or f16 tensor (`x.sum(0)`, `x.mean(-1)`, a bias's gradient) with an f32 accumulator and
rounds the result once (its `opmath_type`); torch-mlir writes the same reduction as a `linalg.generic` whose
output, and so its accumulator, is bf16: every one of the n additions rounds to 8 bits of mantissa, an error
growing with n (a sum of 1024 ones in bf16 stops at 256). Contractions are not affected: torch-mlir already
accumulates them in f32 (an f32 output, `extf` of each operand in the body).

`widen_accumulators` rewrites each such reduction to torch's: the accumulator f32 (the initial value widened),
the summed term widened in the body, the result rounded to the half type once, after the loop. Only sums are
rewritten (a body yielding `term + out`, the output read once): a max or min is exact in any precision. The
rounding after the loop is an elementwise op, which the cleanup fuses into the consumers; under data parallel
the partial sums that reach an all_reduce are the f32 ones (a rounding is not linear), so gradients of
half-precision tensors are summed across devices in f32 (`precision.py`).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, linalg, tensor

from slicer.core.linalg_facts import REDUCTION, input_count, is_linalg_op, iterator_kinds
from slicer.core.names import INDEXING_MAPS_ATTR, ITERATOR_TYPES_ATTR
from slicer.core.operations import clone_mapped
from slicer.dialect import walk_ops

HALF_TYPES = ("bf16", "f16")
"""The element types whose sums are widened."""


def widen_accumulators(module: ir.Operation) -> int:
    """Rewrite every half-precision sum of `module` to accumulate in f32 (see the module docstring); returns how
    many were rewritten."""
    found = [op for op in walk_ops(module) if _half_sum(op) is not None]
    for op in found:
        _widen(op, _half_sum(op))
    return len(found)


def _half_sum(op: ir.Operation) -> ir.Operation | None:
    """The body's `addf` yielded by `op` if `op` is a `linalg.generic` sum with one half-precision output (the
    output read only by that addition), else None."""
    if op.name != linalg.GenericOp.OPERATION_NAME or not is_linalg_op(op) or len(op.results) != 1:
        return None
    if REDUCTION not in iterator_kinds(op):
        return None
    element = ir.RankedTensorType(op.results[0].type).element_type
    if str(element) not in HALF_TYPES:
        return None
    block = op.regions[0].blocks[0]
    out = block.arguments[input_count(op)]
    yielded = block.operations[len(block.operations) - 1].operands[0]
    if isinstance(yielded.owner, ir.Block) or yielded.owner.operation.name != arith.AddFOp.OPERATION_NAME:
        return None
    add = yielded.owner.operation
    if out not in list(add.operands) or len(list(out.uses)) != 1 or add.operands[0] == add.operands[1]:
        return None
    return add


def _widen(op: ir.Operation, add: ir.Operation) -> None:
    """Replace `op` (a half-precision sum whose body yields `add`) by the same sum into an f32 accumulator, its
    result rounded once after the loop."""
    count = input_count(op)
    half_type = ir.RankedTensorType(op.results[0].type)
    inputs, init = list(op.operands)[:count], op.operands[count]
    with ir.InsertionPoint(op), op.location:
        f32 = ir.F32Type.get()
        wide_type = ir.RankedTensorType.get(half_type.shape, f32)
        wide_init = _elementwise(init, wide_type, lambda x: arith.extf(f32, x))
        wide = linalg.GenericOp([wide_type], inputs, [wide_init], op.attributes[INDEXING_MAPS_ATTR],
                                op.attributes[ITERATOR_TYPES_ATTR])
        old_block = op.regions[0].blocks[0]
        block = wide.regions[0].blocks.append(*[a.type for a in list(old_block.arguments)[:count]], f32)
        mapping = {old: new for old, new in zip(list(old_block.arguments)[:count], block.arguments)}
        out = old_block.arguments[count]
        with ir.InsertionPoint(block):
            for body_op in list(old_block.operations)[:-1]:
                body_op = body_op.operation
                if body_op == add:
                    continue
                clone_mapped(body_op, mapping)
            term = next(v for v in add.operands if v != out)
            term = mapping.get(term, term)
            linalg.YieldOp([arith.addf(arith.extf(f32, term), block.arguments[count])])
        rounded = _elementwise(wide.results[0], half_type, lambda x: arith.truncf(half_type.element_type, x))
    op.results[0].replace_all_uses_with(rounded)
    op.erase()


def _elementwise(value: ir.Value, result_type: ir.RankedTensorType, body) -> ir.Value:
    """`body(x)` of every element of `value` into a new tensor of `result_type` (a `linalg.generic`)."""
    rank = result_type.rank
    identity = ir.AffineMapAttr.get(ir.AffineMap.get_identity(rank))
    parallel = ir.Attribute.parse("#linalg.iterator_type<parallel>")
    empty = tensor.empty(list(result_type.shape), result_type.element_type)
    generic = linalg.GenericOp([result_type], [value], [empty], ir.ArrayAttr.get([identity, identity]),
                               ir.ArrayAttr.get([parallel] * rank))
    source = ir.RankedTensorType(value.type).element_type
    block = generic.regions[0].blocks.append(source, result_type.element_type)
    with ir.InsertionPoint(block):
        linalg.YieldOp([body(block.arguments[0])])
    return generic.results[0]


__all__ = ["HALF_TYPES", "widen_accumulators"]
