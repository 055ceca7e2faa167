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

After bufferization, `reject_narrow_memrefs` (the pass `slicer-kernel-reject-narrow-memrefs`) is the guard:
any memref of sub-byte elements still left is a KernelError naming it, not a crash of the LLVM lowering.
"""

from __future__ import annotations

import numpy as np
from mlir import ir
from mlir.dialects import arith, bufferization, builtin, linalg, tensor
from mlir.dialects import func as func_d

from slicer.core.errors import KernelError
from slicer.core.functions import function_type
from slicer.core.names import LINALG_PREFIX
from slicer.core.operations import walk_ops
from slicer.core.pipeline import run_pipeline

# Ops that only move or view elements: the element type is just carried along.
_CARRIERS = tuple(op.OPERATION_NAME for op in (
    tensor.EmptyOp, tensor.ExpandShapeOp, tensor.CollapseShapeOp, tensor.ExtractSliceOp, tensor.InsertSliceOp,
    tensor.ConcatOp, tensor.CastOp, bufferization.AllocTensorOp))
_MODULE, _FUNC, _RETURN = builtin.ModuleOp.OPERATION_NAME, func_d.FuncOp.OPERATION_NAME, func_d.ReturnOp.OPERATION_NAME
_GENERIC, _CONSTANT = linalg.GenericOp.OPERATION_NAME, arith.ConstantOp.OPERATION_NAME
_EXTRACT = tensor.ExtractOp.OPERATION_NAME
GENERALIZE_NAMED_OPS = "func.func(linalg-generalize-named-ops)"


def _is_bool_tensor(type_: ir.Type) -> bool:
    return (isinstance(type_, ir.RankedTensorType) and isinstance(type_.element_type, ir.IntegerType)
            and type_.element_type.width == 1)


def _as_bytes(type_: ir.Type) -> ir.Type:
    if not _is_bool_tensor(type_):
        return type_
    tensor = ir.RankedTensorType(type_)
    return ir.RankedTensorType.get(tensor.shape, ir.IntegerType.get_signless(8), tensor.encoding)


def _touches_bools(op: ir.Operation) -> bool:
    return any(_is_bool_tensor(v.type) for v in list(op.operands) + list(op.results))


def widen_i1(module: ir.Module) -> int:
    """Rewrite every i1 tensor of `module` as an i8 tensor (see the module docstring); returns how many values
    changed type. Needs the module's context to be current."""
    root = module.operation
    ops = list(walk_ops(root))
    if not any(_touches_bools(op) for op in ops if op.name != _MODULE) and not any(
            op.name == _FUNC and any(_is_bool_tensor(t) for t in function_type(op).inputs + function_type(op).results)
            for op in ops):
        return 0
    if any(op.name.startswith(LINALG_PREFIX) and op.name != _GENERIC and _touches_bools(op) for op in ops):
        run_pipeline(module, GENERALIZE_NAMED_OPS)
        ops = list(walk_ops(root))
    changed = 0
    i8 = ir.IntegerType.get_signless(8)
    # Decided on the types as they are now: widening a producer changes its users' operand types.
    targets = [op for op in ops if op.name == _FUNC or (op.name not in (_MODULE, _RETURN) and _touches_bools(op))]
    for op in targets:
        name = op.name
        if name == _FUNC:
            changed += _widen_signature(op)
            continue
        if name == _GENERIC:
            _widen_generic(op, i8)
        elif name == _CONSTANT:  # a new constant of bytes replaces it
            widened_type = _as_bytes(op.results[0].type)
            with ir.InsertionPoint(op), op.location:
                widened = arith.ConstantOp(widened_type, _bytes_constant(ir.DenseElementsAttr(op.opview.value),
                                                                         widened_type, i8))
            op.results[0].replace_all_uses_with(widened.result)
            op.erase()
            changed += 1
            continue
        elif name == _EXTRACT:
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


def _widen_signature(func: ir.Operation) -> int:
    fn_type = function_type(func)
    inputs, results = [_as_bytes(t) for t in fn_type.inputs], [_as_bytes(t) for t in fn_type.results]
    if list(inputs) == list(fn_type.inputs) and list(results) == list(fn_type.results):
        return 0
    func.opview.function_type = ir.TypeAttr.get(ir.FunctionType.get(inputs, results))
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


def reject_narrow_memrefs(module: ir.Module) -> None:
    """Raise a KernelError on any memref of i1 (or narrower-than-byte) elements left after bufferization.

    MLIR 22's memref-to-LLVM lowering *asserts* (aborting the process) on loads/stores of sub-byte
    elements; an error naming the value is better than a crash. Boolean tensors fused into one
    linalg.generic never become buffers, so `select(cmp(a, b), a, b)` chains are fine.
    """
    found: list[str] = []
    for op in walk_ops(module):
        for value in list(op.results) + [a for r in op.regions for b in r.blocks for a in b.arguments]:
            element = getattr(value.type, "element_type", None)
            if isinstance(value.type, ir.MemRefType) and isinstance(element, ir.IntegerType) and element.width < 8:
                found.append(f"{value.type} at {op.location}")
    if found:
        raise KernelError(
            f"buffers of i1 elements ({found[0]}{' and more' if len(found) > 1 else ''}) cannot be lowered: "
            "MLIR 22 cannot store sub-byte memref elements; keep booleans inside one elementwise chain, "
            "or convert them to i8 (arith.extui) before they are returned or stored"
        )


__all__ = ["reject_narrow_memrefs", "widen_i1"]
