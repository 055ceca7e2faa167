"""Narrow floats (bf16, f16) computed in f32: every linalg op that reads or writes them computes its body in f32
and rounds its results once, as they are stored.

Buffers keep their element type: a kernel reads and writes bf16 (half the bytes of f32), and a function's
arguments and results do not change. Inside one op, arithmetic runs in f32 (x86 has no bf16 arithmetic, and
LLVM would otherwise round after every instruction): the op reads its narrow inputs and widens them
(`arith.extf`, exact), computes, and yields f32; its result tensor is f32 and a new elementwise op rounds it to
the narrow type (`arith.truncf`, round to nearest even). A reduction's accumulator is therefore f32 (a bf16
matmul or sum over K elements rounds once, not K times): its init is widened (a `linalg.fill` is refilled in f32
with the same constant). Conversions that produce a narrow float inside a body (`arith.truncf` to bf16, an
integer converted to bf16) keep producing it and are widened right after, so a program that rounds on purpose
(torch computing in bf16 op by op) still rounds there. The rounding op after each widened op is elementwise,
so `linalg-fuse-elementwise-ops` (which runs next) fuses it into its consumers: an elementwise chain rounds at
each op's result, as torch eager does, all in registers.

Details: docs/module-notes.md, `lowering/narrow_floats.py`.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, linalg, tensor
from mlir.dialects import math as math_d

from slicer.core.linalg_facts import defined_in
from slicer.core.names import LINALG_PREFIX, TARGET_AVX512_BF16_ATTR
from slicer.core.operations import defining_op, walk_ops
from slicer.core.pipeline import run_pipeline

from .widen_i1 import GENERALIZE_NAMED_OPS

_GENERIC, _FILL, _CONSTANT = (
    linalg.GenericOp.OPERATION_NAME,
    linalg.FillOp.OPERATION_NAME,
    arith.ConstantOp.OPERATION_NAME,
)
_EXTF, _TRUNCF, _YIELD = arith.ExtFOp.OPERATION_NAME, arith.TruncFOp.OPERATION_NAME, linalg.YieldOp.OPERATION_NAME
#: Ops inside a body that produce a narrow float from another type: they keep rounding, then widen.
_ROUNDING = (_TRUNCF, arith.SIToFPOp.OPERATION_NAME, arith.UIToFPOp.OPERATION_NAME)
#: Ops inside a body that read the bits of a narrow float: they read the f32 value rounded back to it.
_BIT_READERS = (arith.BitcastOp.OPERATION_NAME,)
_PARALLEL = "#linalg.iterator_type<parallel>"


def is_narrow(type_: ir.Type) -> bool:
    """True for the narrow float scalar types (bf16, f16)."""
    return isinstance(type_, (ir.BF16Type, ir.F16Type))


def _element(type_: ir.Type) -> ir.Type:
    return ir.ShapedType(type_).element_type if isinstance(type_, ir.ShapedType) else type_


def _narrow_tensor(type_: ir.Type) -> bool:
    return isinstance(type_, ir.RankedTensorType) and is_narrow(ir.RankedTensorType(type_).element_type)


def _computes_narrow(op: ir.Operation) -> bool:
    """A linalg op (not a fill) with a narrow float operand or result."""
    return (op.name.startswith(LINALG_PREFIX) and op.name not in (_FILL, linalg.YieldOp.OPERATION_NAME)
            and any(_narrow_tensor(v.type) for v in list(op.operands) + list(op.results)))


def widen_narrow_floats(module: ir.Module) -> int:
    """Rewrite every linalg op of `module` on bf16/f16 to compute in f32 (module docstring); returns how many
    ops changed. Needs the module's context to be current."""
    root = module.operation
    if not any(_computes_narrow(op) for op in walk_ops(root)):
        return 0
    if any(_computes_narrow(op) and op.name != _GENERIC for op in walk_ops(root)):
        run_pipeline(module, GENERALIZE_NAMED_OPS)
    f32 = ir.F32Type.get()
    changed = 0
    for op in walk_ops(root):
        if op.name != _GENERIC or not _computes_narrow(op) or _moves_only(op):
            continue
        with op.location:
            if any(is_narrow(_element(r.type)) for r in op.results):
                _widen_generic(op, f32)
            else:  # narrow inputs only (a comparison of bf16 values, a cast to f32): nothing to round
                _widen_body(op, f32)
        changed += 1
    return changed


#: Upstream's expansion of `arith.truncf` to bf16 into integer ops (round to nearest even, NaN kept a NaN), which
#: vectorizes. Without it LLVM lowers the truncation to a call of `__truncsfbf2` on CPUs without AVX512-BF16, a
#: symbol kernel libraries do not link. It also expands a few other arith ops (ceildivsi, maximumf, ...) into
#: equivalent ones, so it runs only on modules that round to bf16.
EXPAND_BF16 = "arith-expand{include-bf16=true}"


def expand_bf16_truncation(module: ir.Module) -> bool:
    """Run `EXPAND_BF16` if `module` has an `arith.truncf` to bf16 (scalar or vector), after rounding f64 to
    a narrow float through f32 exactly (`_round_f64_through_f32`); returns whether it ran. A module marked for
    a target with AVX512-BF16 (`TARGET_AVX512_BF16_ATTR`, set by the AOT compiler) keeps its f32 -> bf16
    roundings: LLVM makes them `vcvtneps2bf16`, faster than the integer expansion."""
    for op in walk_ops(module.operation):
        if op.name == _TRUNCF and isinstance(_element_of_any(op.operands[0].type), ir.F64Type) \
                and is_narrow(_element_of_any(op.results[0].type)):
            _round_f64_through_f32(op)
    attributes = module.operation.attributes
    if TARGET_AVX512_BF16_ATTR in attributes and str(attributes[TARGET_AVX512_BF16_ATTR]) == "true":
        return False

    def rounds_to_bf16(op: ir.Operation) -> bool:
        return op.name == _TRUNCF and isinstance(_element_of_any(op.results[0].type), ir.BF16Type)

    if not any(rounds_to_bf16(op) for op in walk_ops(module.operation)):
        return False
    run_pipeline(module, EXPAND_BF16)
    return True


def _round_f64_through_f32(op: ir.Operation) -> None:
    """Replace `truncf f64 -> bf16/f16` (LLVM: a call of __truncdfbf2 / __truncdfhf2, which kernel libraries do
    not link) by f64 -> f32 rounded to odd, then f32 -> narrow to nearest even: exact, because f32 keeps more
    than two bits beyond the narrow mantissa (no double rounding). Round to odd: the f32 truncation toward zero,
    its last bit set if it was inexact; computed from the nearest-even truncation stepped back one unit when it
    rounded away from zero."""
    x, narrow = op.operands[0], op.results[0].type
    shape = ir.VectorType(x.type).shape if isinstance(x.type, ir.VectorType) else None
    f32, i32 = ir.F32Type.get(), ir.IntegerType.get_signless(32)

    def typed(element):
        return ir.VectorType.get(shape, element) if shape is not None else element

    def constant(element, value):
        attr = ir.IntegerAttr.get(element, value)
        return arith.ConstantOp(typed(element), ir.DenseElementsAttr.get_splat(typed(element), attr)
                                if shape is not None else attr).result

    with ir.InsertionPoint(op), op.location:
        nearest = arith.truncf(typed(f32), x)
        back = arith.extf(x.type, nearest)
        inexact = arith.cmpf(arith.CmpFPredicate.ONE, back, x)
        away = arith.cmpf(arith.CmpFPredicate.OGT, _abs(back), _abs(x))
        bits = arith.bitcast(typed(i32), nearest)
        toward_zero = arith.select(away, arith.subi(bits, constant(i32, 1)), bits)
        odd = arith.ori(toward_zero, arith.extui(typed(i32), inexact))
        rounded = arith.truncf(narrow, arith.bitcast(typed(f32), odd))
    op.results[0].replace_all_uses_with(rounded)
    op.erase()


def _abs(value: ir.Value) -> ir.Value:
    return math_d.absf(value)


def _element_of_any(type_: ir.Type) -> ir.Type:
    return ir.ShapedType(type_).element_type if isinstance(type_, (ir.ShapedType, ir.VectorType)) else type_


def _widen_generic(op: ir.Operation, f32: ir.Type) -> None:
    """Body in f32, f32 results, each narrow result rounded by an elementwise op after `op`."""
    outputs = list(op.operands)[len(op.operands) - len(op.results):]
    body = op.regions[0].blocks[0]
    out_args = list(body.arguments)[len(body.arguments) - len(op.results):]
    for index, (init, arg) in enumerate(zip(outputs, out_args)):
        if not _narrow_tensor(init.type):
            continue
        with ir.InsertionPoint(op), op.location:
            wide = _wide_init(init, f32, read=bool(list(arg.uses)))
        op.operands[len(op.operands) - len(op.results) + index] = wide
        arg.set_type(f32)
    _widen_body(op, f32)
    for result in op.results:
        if not _narrow_tensor(result.type):
            continue
        narrow_type = result.type
        result.set_type(_with_element(narrow_type, f32))
        with ir.InsertionPoint.after(op), op.location:
            rounded = _elementwise_cast(result, narrow_type, arith.truncf)
        result.replace_all_uses_except(rounded, rounded.owner.operation)


def _widen_body(op: ir.Operation, f32: ir.Type) -> None:
    """Widen the body's narrow input arguments on entry, and narrow values it captures from outside before the
    op, and retype its narrow values as f32."""
    body = op.regions[0].blocks[0]
    first = body.operations[0]
    # bitcasts read a narrow float's bits: they get the value rounded back to its narrow type (recorded first)
    bit_reads = [(inner, inner.operands[0].type) for inner in body.operations
                 if inner.name in _BIT_READERS and is_narrow(inner.operands[0].type)]
    captured: dict = {}
    for inner in list(body.operations):
        for index, operand in enumerate(inner.operands):
            if not is_narrow(operand.type) or defined_in(operand, op):
                continue
            if operand not in captured:
                with ir.InsertionPoint(op):
                    captured[operand] = arith.extf(f32, operand)
            inner.operands[index] = captured[operand]
    for arg in body.arguments:
        if is_narrow(arg.type) and list(arg.uses):
            with ir.InsertionPoint(first), op.location:
                wide = arith.extf(f32, arg)
            arg.replace_all_uses_except(wide, wide.owner.operation)
    for inner in list(body.operations):
        _widen_inner(inner, f32)
    for inner, narrow_type in bit_reads:
        with ir.InsertionPoint(inner), inner.location:
            inner.operands[0] = arith.truncf(narrow_type, inner.operands[0])


def _widen_inner(inner: ir.Operation, f32: ir.Type) -> None:
    """One op of a body, its operands already f32 where they were narrow."""
    name = inner.name
    if name == _YIELD or not any(is_narrow(r.type) for r in inner.results):
        if name == _EXTF and inner.operands[0].type == inner.results[0].type:  # a widening made redundant
            inner.results[0].replace_all_uses_with(inner.operands[0])
            inner.erase()
        return
    if name == _EXTF and inner.operands[0].type == f32:  # f16 -> bf16 style widening of an already f32 value
        inner.results[0].replace_all_uses_with(inner.operands[0])
        inner.erase()
        return
    if name == _CONSTANT:
        with ir.InsertionPoint(inner), inner.location:
            wide = arith.ConstantOp(f32, ir.FloatAttr.get(f32, ir.FloatAttr(inner.opview.value).value))
        inner.results[0].replace_all_uses_with(wide.result)
        inner.erase()
        return
    if name.split(".")[0] not in ("arith", "math") or name in _ROUNDING:
        # it makes the narrow value itself (a rounding, a read of a captured tensor: tensor.extract): widen after
        result = inner.results[0]
        with ir.InsertionPoint.after(inner), inner.location:
            wide = arith.extf(f32, result)
        result.replace_all_uses_except(wide, wide.owner.operation)
        return
    for result in inner.results:
        if is_narrow(result.type):
            result.set_type(f32)


def _with_element(type_: ir.Type, element: ir.Type) -> ir.Type:
    shaped = ir.RankedTensorType(type_)
    return ir.RankedTensorType.get(shaped.shape, element, shaped.encoding)


def _wide_init(init: ir.Value, f32: ir.Type, read: bool) -> ir.Value:
    """The f32 init of an output: a fill of the same constant, the narrow init widened if the body reads it,
    else an empty tensor."""
    wide_type = _with_element(init.type, f32)
    shape = ir.RankedTensorType(wide_type).shape
    empty = tensor.EmptyOp(shape, f32).result
    if not read:
        return empty
    value = _filled_with(init)
    if value is not None:
        with ir.InsertionPoint(empty.owner.operation):
            wide_value = arith.extf(f32, value) if is_narrow(value.type) else value
        return linalg.fill(wide_value, outs=[empty])
    return _elementwise_cast(init, wide_type, arith.extf)


def _moves_only(op: ir.Operation) -> bool:
    """A generic that computes nothing: its body only yields its arguments (a generalized fill, copy or
    transpose). Its elements need no widening: it moves them as they are."""
    body = op.regions[0].blocks[0]
    return len(body.operations) == 1 and all(isinstance(v, ir.BlockArgument) for v in body.operations[0].operands)


def _filled_with(init: ir.Value) -> ir.Value | None:
    """The scalar a tensor is filled with (a `linalg.fill`, or its generalized form), or None."""
    owner = defining_op(init)
    if owner is None:
        return None
    if owner.name == _FILL:
        return owner.operands[0]
    if owner.name == _GENERIC and _moves_only(owner) and len(owner.operands) == 2 \
            and not isinstance(owner.operands[0].type, ir.ShapedType):
        return owner.operands[0]
    return None


def _elementwise_cast(value: ir.Value, to_type: ir.Type, cast) -> ir.Value:
    """`value` converted element by element to `to_type` by a linalg.generic whose body is `cast`."""
    shaped = ir.RankedTensorType(to_type)
    rank = shaped.rank
    identity = ir.AffineMap.get_identity(rank)
    empty = tensor.EmptyOp(shaped.shape, shaped.element_type).result
    generic = linalg.GenericOp([to_type], [value], [empty], ir.ArrayAttr.get([ir.AffineMapAttr.get(identity)] * 2),
                               ir.ArrayAttr.get([ir.Attribute.parse(_PARALLEL)] * rank))
    block = generic.regions[0].blocks.append(_element(value.type), shaped.element_type)
    with ir.InsertionPoint(block):
        linalg.YieldOp([cast(shaped.element_type, block.arguments[0])])
    return generic.result


__all__ = ["EXPAND_BF16", "expand_bf16_truncation", "is_narrow", "widen_narrow_floats"]
