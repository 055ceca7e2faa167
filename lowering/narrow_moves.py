"""Narrow floats moved as integers: the vector ops that only move elements (extract, insert, shuffle,
transpose, to/from elements, broadcast, shape casts) carry bf16 / f16 values as i16, with an exact
`arith.bitcast` where a moved value comes from or goes to anything else (a load, a store, an arithmetic op).

A bf16 transpose of odd extents (an input gradient's phases, a patch, a packed panel) vectorizes into shuffles
and `vector.to_elements` / `vector.from_elements` of scalars; LLVM's instruction selection then soft-promotes
the scalar bf16 elements and aborts the process ("Do not know how to soft promote this operator's operand" on
a `scalar_to_vector`). The same moves on i16 select to ordinary integer shuffles. Only the element type of the
moving ops changes: the bits are the same (bitcasts are free), loads and stores keep the buffers' narrow
type, and arithmetic still sees its narrow operands (`narrow_floats.py` widens it to f32 before this).

Runs on the vector ops the vectorizer and `convert-vector-to-scf` leave, before the LLVM lowering.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, vector

from slicer.core.operations import walk_ops

_MOVES = frozenset(op.OPERATION_NAME for op in (
    vector.ExtractOp, vector.InsertOp, vector.ExtractStridedSliceOp, vector.InsertStridedSliceOp, vector.ShuffleOp,
    vector.TransposeOp, vector.ToElementsOp, vector.FromElementsOp, vector.BroadcastOp, vector.ShapeCastOp,
    vector.InterleaveOp, vector.DeinterleaveOp)) | {"ub.poison"}
"""Ops whose results are some of their operands' elements rearranged (or undefined, `ub.poison`)."""


def _narrow(type_: ir.Type) -> bool:
    element = ir.VectorType(type_).element_type if isinstance(type_, ir.VectorType) else type_
    return isinstance(element, (ir.BF16Type, ir.F16Type))


def _as_integer(type_: ir.Type) -> ir.Type:
    i16 = ir.IntegerType.get_signless(16)
    if isinstance(type_, ir.VectorType):
        vec = ir.VectorType(type_)
        scalable = [i for i, flag in enumerate(vec.scalable_dims) if flag]
        return ir.VectorType.get(vec.shape, i16, scalable_dims=scalable or None)
    return i16


def _moves(op: ir.Operation) -> bool:
    return op.name in _MOVES and any(_narrow(v.type) for v in list(op.operands) + list(op.results))


def move_narrow_as_integers(module: ir.Module) -> int:
    """Retype every narrow-float moving op of `module` to i16 (module docstring); returns how many ops changed.
    Needs the module's context to be current."""
    ops = [op for op in walk_ops(module.operation) if _moves(op)]
    for op in ops:
        with op.location:
            for i, operand in enumerate(op.operands):  # narrow values made elsewhere enter as their bits
                if _narrow(operand.type) and not _made_by_move(operand):
                    with ir.InsertionPoint(op):
                        op.operands[i] = arith.bitcast(_as_integer(operand.type), operand)
            for result in op.results:
                if not _narrow(result.type):
                    continue
                narrow = result.type
                # A user with a narrow operand that is a move is itself retyped; any other reads the value back.
                outside = [(use.owner, use.operand_number) for use in result.uses if use.owner.name not in _MOVES]
                result.set_type(_as_integer(narrow))
                for owner, number in outside:
                    with ir.InsertionPoint(owner):
                        owner.operands[number] = arith.bitcast(narrow, result)
    return len(ops)


def _made_by_move(value: ir.Value) -> bool:
    return isinstance(value, ir.OpResult) and value.owner.name in _MOVES


__all__ = ["move_narrow_as_integers"]
