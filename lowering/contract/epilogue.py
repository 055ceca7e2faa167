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
"""

from __future__ import annotations

from math import prod

from mlir import ir
from mlir.dialects import arith, linalg, memref

from slicer.core.linalg_facts import PARALLEL, indexing_maps, input_count, iterator_kinds, projected_dims
from slicer.core.operations import walk_ops

from ..memref_facts import MemAccess, static_strides
from .analysis import Contraction, with_output
from .bf16_gemm import BF16_BLOCKS

_GENERIC, _TRUNCF = linalg.GenericOp.OPERATION_NAME, arith.TruncFOp.OPERATION_NAME
_YIELD = linalg.YieldOp.OPERATION_NAME


def _is_rounding(op: ir.Operation, buffer: ir.Value) -> bool:
    """A generic reading `buffer` (f32) only, writing one bf16 memref, all loops parallel, its maps
    permutations, whose body yields `arith.truncf` of its input."""
    if op.name != _GENERIC or input_count(op) != 1 or len(op.operands) != 2 or op.operands[0] != buffer:
        return False
    out_type = op.operands[1].type
    if not isinstance(out_type, ir.MemRefType) or not isinstance(ir.MemRefType(out_type).element_type, ir.BF16Type):
        return False
    if any(kind != PARALLEL for kind in iterator_kinds(op)) or any(not m.is_permutation for m in indexing_maps(op)):
        return False
    block = op.regions[0].blocks[0]
    body = list(block.operations)
    return (len(body) == 2 and body[0].name == _TRUNCF and body[0].operands[0] == block.arguments[0]
            and body[1].name == _YIELD and body[1].operands[0] == body[0].results[0])


def rounding_epilogue(c: Contraction) -> tuple[ir.Operation, Contraction] | None:
    """(the rounding op, `c` writing bf16 into the rounding's output) when `c`'s f32 C is a local buffer whose
    only reader is a rounding (`_is_rounding`) and K fits one K block of the bf16 GEMM; None otherwise."""
    if c.element != "f32" or prod(c.ranges[d] for d in c.k) > BF16_BLOCKS["kc"]:
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
        if _is_rounding(user, buffer):
            readers.append(user)
        elif not _fills(user, buffer):
            return None
    if len(readers) != 1 or readers[0].block != c.op.operation.block:
        return None
    rounding = readers[0]
    out = rounding.operands[1]
    between = _between(c.op.operation, rounding)
    if between is None or _touched(between, out):  # the GEMM writes `out` earlier than the rounding did
        return None
    strides = static_strides(ir.MemRefType(out.type))
    if strides is None or not ir.MemRefType(out.type).has_static_shape:
        return None
    read, written = (projected_dims(m) for m in indexing_maps(rounding))
    if read is None or written is None:  # not a projection of the loop dims: not a rounding of C as it is
        return None
    # output dim j is the rounding's loop written[j], which reads C's dim k where read[k] == written[j]
    dims = tuple(c.output.dims[read.index(loop)] for loop in written)
    return rounding, with_output(c, MemAccess(out, ir.MemRefType(out.type), dims, strides), "bf16")


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
