"""Widenings read by several ops folded into each reader: the readers read the narrow tensor and widen it in
their bodies, so no wide copy of it is written.

A `linalg.generic` that only widens its input (`arith.extf`: bf16 -> f32, f32 -> f64; same shape, identity
maps) costs a pass over memory and writes a tensor twice the size of its input. `linalg-fuse-elementwise-ops`
folds such a producer into its consumer only when the consumer is its one reader; a widening read by several
ops stays. That is the common case in mixed precision: torch's import widens a layer norm's bf16 output once
and reads it from the three projections q, k and v, and those contractions then read an f32 operand, which
takes them off the bf16 GEMM (`contract/bf16_gemm.py`) onto the f32 one at half its rate. An `arith.extf` is
exact, so widening in each reader computes the same values.

Each reader that is a `linalg.generic` and reads the widening as an input gets the widening's input in its
place (same indexing map: the widening's maps are identities), its body widening the block argument on
entry; the widening is erased when nothing else reads it (a function result, another kind of op keeps it).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, linalg

from slicer.core.linalg_facts import PARALLEL, indexing_maps, input_count, iterator_kinds
from slicer.core.operations import walk_ops

_GENERIC, _EXTF, _YIELD = linalg.GenericOp.OPERATION_NAME, arith.ExtFOp.OPERATION_NAME, linalg.YieldOp.OPERATION_NAME


def is_widening(op: ir.Operation) -> bool:
    """A generic on tensors with one input and one result, identity maps, all loops parallel, whose body
    yields `arith.extf` of the input's element, or a chain of them (bf16 -> f32 -> f64; its init unread)."""
    return _chain(op) is not None


def _chain(op: ir.Operation) -> list[ir.Type] | None:
    """The types a widening's body widens its element to, in order (`is_widening`), or None."""
    if op.name != _GENERIC or len(op.results) != 1 or input_count(op) != 1 or len(op.operands) != 2:
        return None
    if not isinstance(op.operands[0].type, ir.RankedTensorType):
        return None
    if any(m != ir.AffineMap.get_identity(m.n_dims) for m in indexing_maps(op)):
        return None
    if any(kind != PARALLEL for kind in iterator_kinds(op)):
        return None
    block = op.regions[0].blocks[0]
    *body, last = list(block.operations)
    value = block.arguments[0]
    for inner in body:
        if inner.name != _EXTF or inner.operands[0] != value:
            return None
        value = inner.results[0]
    if not body or last.name != _YIELD or last.operands[0] != value:
        return None
    return [inner.results[0].type for inner in body]


def fold_widenings(module: ir.Module) -> int:
    """Fold every widening of `module` into the generics that read it as an input (module docstring); returns
    how many reads changed. Needs the module's context to be current."""
    changed = 0
    for op in walk_ops(module, _GENERIC):
        chain = _chain(op)
        if chain is None:
            continue
        source, result = op.operands[0], op.results[0]
        for use in list(result.uses):
            reader = use.owner.operation
            if reader.name != _GENERIC or use.operand_number >= input_count(reader):
                continue
            _read_narrow(reader, use.operand_number, source, chain)
            changed += 1
        if not list(result.uses):
            op.erase()
    return changed


def _read_narrow(reader: ir.Operation, index: int, source: ir.Value, chain: list[ir.Type]) -> None:
    """`reader`'s input `index` becomes `source`, its block argument narrow and widened on entry through the
    types of `chain`."""
    reader.operands[index] = source
    block = reader.regions[0].blocks[0]
    arg = block.arguments[index]
    arg.set_type(ir.RankedTensorType(source.type).element_type)
    first = None
    with ir.InsertionPoint(block.operations[0]), reader.location:
        widened = arg
        for type_ in chain:
            widened = arith.extf(type_, widened)
            first = first or widened.owner.operation
    arg.replace_all_uses_except(widened, first)


__all__ = ["fold_widenings", "is_widening"]
