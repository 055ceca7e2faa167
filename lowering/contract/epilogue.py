"""The rounding epilogue of a bf16 contraction, fused into its GEMM: the GEMM stores bf16 straight into the
buffer the rounding wrote, and neither the f32 result nor the pass over it remain.

Mixed precision makes a contraction of bf16 operands yield f32 (its accumulator; `narrow_floats.py`) followed
by an elementwise op that rounds it to bf16, often with a transpose (attention's context `p @ v`, computed as
[b, h, s, e] and read as [b, s, h, e] by the output projection):

    linalg.generic ins(%a, %b : bf16, bf16) outs(%c : memref<...xf32>) { out + extf(a) * extf(b) }
    linalg.generic ins(%c : f32, permuted) outs(%r : memref<...xbf16>) { truncf }

When `%c` is a local buffer that nothing else reads, the bf16 GEMM (`bf16_gemm.py`, whose bf16 C is rounded as
a tile is stored) writes `%r` directly through the rounding's maps: C's dims are `%r`'s, permuted. The result
is the same bits, the f32 sum rounded once to nearest even, provided the sum is whole when it is rounded, so
only where K fits one K block of the bf16 GEMM (`BF16_BLOCKS["kc"]`): a longer K keeps the f32 C and the
separate rounding.

A Linear layer's bias comes in the same op: `truncf(C + extf(bias))` (torch's `addmm` under autocast rounds
once, after the bias). The GEMM then adds the bias (any projection of C's dims, bf16 or f32) to each whole f32
tile before rounding it: the same f32 addition on the same values, so the same bits.
"""

from __future__ import annotations

from dataclasses import replace
from math import prod

from mlir import ir
from mlir.dialects import arith, linalg, memref

from slicer.core.linalg_facts import PARALLEL, indexing_maps, input_count, iterator_kinds, projected_dims
from slicer.core.operations import walk_ops

from ..memref_facts import MemAccess, static_strides
from .analysis import Contraction, with_output
from .bf16_gemm import BF16_BLOCKS

_GENERIC, _TRUNCF = linalg.GenericOp.OPERATION_NAME, arith.TruncFOp.OPERATION_NAME
_YIELD, _EXTF, _ADDF = linalg.YieldOp.OPERATION_NAME, arith.ExtFOp.OPERATION_NAME, arith.AddFOp.OPERATION_NAME


def _rounding_addend(op: ir.Operation, buffer: ir.Value) -> int | None:
    """When `op` rounds `buffer` (f32, its first input) to one bf16 memref, all loops parallel, the maps of C and
    the output permutations, its body `truncf(in0)` or `truncf(in0 + b)` with `b` its second input (`extf` of it
    when it is narrower), read through a projection: 0 for the first, 1 for the second; None otherwise."""
    if op.name != _GENERIC or op.operands[0] != buffer or input_count(op) not in (1, 2) or len(op.operands) != \
            input_count(op) + 1:
        return None
    out_type = op.operands[-1].type
    if not isinstance(out_type, ir.MemRefType) or not isinstance(ir.MemRefType(out_type).element_type, ir.BF16Type):
        return None
    maps = indexing_maps(op)
    if any(kind != PARALLEL for kind in iterator_kinds(op)) or not (maps[0].is_permutation and maps[-1].is_permutation):
        return None
    block = op.regions[0].blocks[0]
    body, args = list(block.operations), list(block.arguments)
    if len(body) < 2 or body[-1].name != _YIELD or body[-2].name != _TRUNCF:
        return None
    if body[-1].operands[0] != body[-2].results[0]:
        return None
    rounded = body[-2].operands[0]
    if len(args) == 2:
        return 0 if len(body) == 2 and rounded == args[0] else None
    addend_dims = projected_dims(maps[1])
    if addend_dims is None or len(set(addend_dims)) != len(addend_dims):
        return None
    ops = body[:-2]
    widened = ops[0].results[0] if len(ops) == 2 and ops[0].name == _EXTF and ops[0].operands[0] == args[1] else None
    addend = widened if widened is not None else args[1]
    if len(ops) != (2 if widened is not None else 1) or ops[-1].name != _ADDF or rounded != ops[-1].results[0]:
        return None
    first, second = ops[-1].operands
    if str(addend.type) != "f32" or not ((first == args[0] and second == addend) or
                                         (first == addend and second == args[0])):
        return None
    return 1


def rounding_epilogue(c: Contraction) -> tuple[ir.Operation, Contraction] | None:
    """(the rounding op, `c` writing bf16 into the rounding's output, adding its addend first if it has one) when
    `c`'s f32 C is a zero-initialised local buffer whose only reader is a rounding (`_rounding_addend`) and K fits
    one K block of the bf16 GEMM; None otherwise."""
    if c.element != "f32" or not c.zero_init or prod(c.ranges[d] for d in c.k) > BF16_BLOCKS["kc"]:
        return None
    buffer = c.output.value
    owner = None if isinstance(buffer, ir.BlockArgument) else buffer.owner
    if owner is None or owner.name != memref.AllocOp.OPERATION_NAME:
        return None
    readers = []
    for use in buffer.uses:
        user = use.owner.operation
        if user == c.op.operation:
            continue
        if _rounding_addend(user, buffer) is not None:
            readers.append(user)
        elif not _fills(user, buffer):
            return None
    if len(readers) != 1 or readers[0].block != c.op.operation.block:
        return None
    rounding = readers[0]
    out = rounding.operands[-1]
    between = _between(c.op.operation, rounding)
    # the GEMM writes `out` (and reads the addend) earlier than the rounding did
    if between is None or any(_touched(between, v) for v in rounding.operands[1:]):
        return None
    maps = indexing_maps(rounding)
    read, written = projected_dims(maps[0]), projected_dims(maps[-1])
    if read is None or written is None:  # not a projection of the loop dims: not a rounding of C as it is
        return None

    def access(value: ir.Value, loops) -> MemAccess | None:
        """`value` read or written at the rounding's `loops`, as an access by `c`'s loop dims: rounding loop l
        is C's dim k where read[k] == l, which is `c`'s loop c.output.dims[k]."""
        strides = static_strides(ir.MemRefType(value.type))
        if strides is None or not ir.MemRefType(value.type).has_static_shape:
            return None
        return MemAccess(value, ir.MemRefType(value.type), tuple(c.output.dims[read.index(lo)] for lo in loops),
                         strides)

    stored = access(out, written)
    addend_loops = projected_dims(maps[1]) if input_count(rounding) == 2 else None
    addend = access(rounding.operands[1], addend_loops) if addend_loops is not None else None
    if stored is None or (input_count(rounding) == 2 and addend is None):
        return None
    fused = with_output(c, stored, "bf16")
    n0 = fused.n[-1]
    if addend is not None and n0 in addend.dims and (addend.dims[-1] != n0 or addend.strides[-1] != 1):
        return None  # the epilogue reads the addend in vectors along N0, or one value for a whole row
    return rounding, replace(fused, addend=addend)


def _fills(user: ir.Operation, buffer: ir.Value) -> bool:
    """Whether `user` only writes a constant into `buffer` (the zero fill before the contraction)."""
    if user.name == linalg.FillOp.OPERATION_NAME:
        return user.operands[-1] == buffer
    return (user.name == _GENERIC and len(user.operands) == 2 and user.operands[1] == buffer
            and not isinstance(user.operands[0].type, ir.ShapedType))


def _between(first: ir.Operation, second: ir.Operation) -> list[ir.Operation] | None:
    """The ops of the block strictly between `first` and `second` (nested ops included), or None when
    `second` does not come after `first`."""
    found: list[ir.Operation] | None = None
    for op in first.block.operations:
        op = op.operation
        if op == second:
            return found
        if found is not None:
            found.extend(walk_ops(op))
        if op == first:
            found = []
    return None


_VIEWS = (memref.SubViewOp.OPERATION_NAME, memref.CastOp.OPERATION_NAME, memref.ExpandShapeOp.OPERATION_NAME,
          memref.CollapseShapeOp.OPERATION_NAME, memref.ReinterpretCastOp.OPERATION_NAME)


def _touched(ops: list[ir.Operation], buffer: ir.Value) -> bool:
    """Whether any of `ops` reads or writes `buffer`'s memory: an operand that is its root allocation or a view
    of it (views followed both ways)."""
    root = buffer
    while not isinstance(root, ir.BlockArgument) and root.owner.name in _VIEWS:
        root = root.owner.operands[0]
    aliases, stack = set(), [root]
    while stack:
        value = stack.pop()
        if value in aliases:
            continue
        aliases.add(value)
        for use in value.uses:
            user = use.owner.operation
            if user.name in _VIEWS:
                stack.extend(user.results)
    return any(operand in aliases for op in ops for operand in op.operands)


__all__ = ["rounding_epilogue"]
