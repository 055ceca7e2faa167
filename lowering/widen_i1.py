"""Boolean tensors stored as bytes: every `tensor<...xi1>` of a kernel module becomes `tensor<...xi8>` before
bufferization, so no buffer of i1 elements is left for the LLVM lowering (MLIR 22's memref-to-LLVM lowering
asserts on sub-byte element stores).

Attention masks (`scaled_dot_product_attention`, `nn.TransformerEncoderLayer`, a model's boolean mask buffer)
are boolean tensors that cross kernels and are function arguments. A numpy boolean array is one byte per
element, 0 or 1, which is exactly an i8 buffer holding `arith.extui` of the booleans: the kernel's calling
convention does not change (callers keep passing and receiving numpy booleans). Upstream's narrow-type
emulation packs i1 into bits instead, which numpy's layout is not.

The rewrite, per function: i1 tensor arguments and results are i8; every tensor result of i1 elements becomes
i8 (element-type agnostic tensor ops: empty, reshapes, slices, concat, cast); a `linalg.generic` reads an i8
element and truncates it (`arith.trunci`, exact on 0/1) and extends the i1 it yields (`arith.extui`); a
`linalg.fill` fills with the extended scalar; a boolean `arith.constant` tensor becomes bytes; `tensor.extract`
truncates what it reads. Named linalg ops on booleans are generalized first. Any other op on boolean tensors
is a KernelError naming it.
"""

from __future__ import annotations

import numpy as np
from mlir import ir
from mlir.dialects import arith

from slicer.core.errors import KernelError
from slicer.core.pipeline import run_pipeline

# Ops that only move or view elements: the element type is just carried along.
_CARRIERS = ("tensor.empty", "tensor.expand_shape", "tensor.collapse_shape", "tensor.extract_slice",
             "tensor.insert_slice", "tensor.concat", "tensor.cast", "bufferization.alloc_tensor")


def _is_bool_tensor(type_: ir.Type) -> bool:
    return (isinstance(type_, ir.RankedTensorType) and isinstance(type_.element_type, ir.IntegerType)
            and type_.element_type.width == 1)


def _as_bytes(type_: ir.Type) -> ir.Type:
    if not _is_bool_tensor(type_):
        return type_
    tensor = ir.RankedTensorType(type_)
    return ir.RankedTensorType.get(tensor.shape, ir.IntegerType.get_signless(8), tensor.encoding)


def _walk(root: ir.Operation) -> list[ir.Operation]:
    found: list[ir.Operation] = []
    root.walk(lambda op: found.append(op.operation) or ir.WalkResult.ADVANCE, ir.WalkOrder.PRE_ORDER)
    return found


def _touches_bools(op: ir.Operation) -> bool:
    return any(_is_bool_tensor(v.type) for v in list(op.operands) + list(op.results))


def widen_i1(module: ir.Module) -> int:
    """Rewrite every i1 tensor of `module` as an i8 tensor (see the module docstring); returns how many values
    changed type. Needs the module's context to be current."""
    root = module.operation
    ops = _walk(root)
    if not any(_touches_bools(op) for op in ops if op.name != "builtin.module") and not any(
            op.name == "func.func" and any(_is_bool_tensor(t) for t in _func_type(op).inputs + _func_type(op).results)
            for op in ops):
        return 0
    if any(op.name.startswith("linalg.") and op.name != "linalg.generic" and _touches_bools(op) for op in ops):
        run_pipeline(module, "func.func(linalg-generalize-named-ops)")
        ops = _walk(root)
    changed = 0
    i8 = ir.IntegerType.get_signless(8)
    # Decided on the types as they are now: widening a producer changes its users' operand types.
    targets = [op for op in ops if op.name == "func.func" or (op.name not in ("builtin.module", "func.return")
                                                              and _touches_bools(op))]
    for op in targets:
        name = op.name
        if name == "func.func":
            changed += _widen_signature(op)
            continue
        if name == "linalg.generic":
            _widen_generic(op, i8)
        elif name == "arith.constant":
            op.attributes["value"] = _bytes_constant(ir.DenseElementsAttr(op.attributes["value"]),
                                                     _as_bytes(op.results[0].type), i8)
        elif name == "tensor.extract":
            result = op.results[0]
            with ir.InsertionPoint.after(op), op.location:
                truncated = arith.trunci(result.type, result)
            result.replace_all_uses_except(truncated, truncated.owner.operation)
            result.set_type(i8)
        elif name not in _CARRIERS:
            raise KernelError(f"'{name}' at {op.location} works on boolean (i1) tensors, which kernels store as bytes "
                              f"(i8); it has no rewrite for that: compute the booleans with arith/linalg ops instead")
        for result in op.results:
            if _is_bool_tensor(result.type):
                result.set_type(_as_bytes(result.type))
                changed += 1
    return changed


def _bytes_constant(value: ir.DenseElementsAttr, type_: ir.Type, i8: ir.Type) -> ir.Attribute:
    if value.is_splat:
        return ir.DenseElementsAttr.get_splat(type_, ir.IntegerAttr.get(i8, int(value.get_splat_value().value != 0)))
    ints = ir.DenseIntElementsAttr(value)
    bits = [int(ints[i] != 0) for i in range(len(ints))]
    return ir.DenseElementsAttr.get(np.array(bits, np.int8).reshape(ir.RankedTensorType(type_).shape), type=type_)


def _func_type(func: ir.Operation) -> ir.FunctionType:
    return ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)


def _widen_signature(func: ir.Operation) -> int:
    fn_type = _func_type(func)
    inputs, results = [_as_bytes(t) for t in fn_type.inputs], [_as_bytes(t) for t in fn_type.results]
    if list(inputs) == list(fn_type.inputs) and list(results) == list(fn_type.results):
        return 0
    func.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(inputs, results))
    changed = 0
    for region in func.regions:
        for block in list(region.blocks)[:1]:
            for arg in block.arguments:
                if _is_bool_tensor(arg.type):
                    arg.set_type(_as_bytes(arg.type))
                    changed += 1
    return changed


def _widen_generic(op: ir.Operation, i8: ir.Type) -> None:
    body = op.regions[0].blocks[0]
    operands = list(op.operands)
    first = body.operations[0] if len(body.operations) else None
    for arg, operand in zip(body.arguments, operands):
        # (the operand's type may be widened already, by its producer's turn: the element is what tells)
        if not (isinstance(operand.type, ir.RankedTensorType) and isinstance(arg.type, ir.IntegerType)
                and arg.type.width == 1):
            continue
        arg.set_type(i8)
        if not list(arg.uses):
            continue
        with ir.InsertionPoint(first) if first is not None else ir.InsertionPoint(body), op.location:
            truncated = arith.trunci(ir.IntegerType.get_signless(1), arg)
        arg.replace_all_uses_except(truncated, truncated.owner.operation)
    terminator = body.operations[len(body.operations) - 1]
    for index, result in enumerate(op.results):
        if _is_bool_tensor(result.type):
            with ir.InsertionPoint(terminator), op.location:
                terminator.operands[index] = arith.extui(i8, terminator.operands[index])


__all__ = ["widen_i1"]
