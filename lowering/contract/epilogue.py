"""The epilogue of a bf16 contraction, fused into its GEMM: the GEMM stores straight into the buffer the
epilogue op wrote, and neither the f32 result nor the pass over it remain.

Mixed precision makes a contraction of bf16 operands yield f32 (its accumulator; `narrow_floats.py`), then an
elementwise op rounds it, often transposed (attention's context [b, h, s, e] read as [b, s, h, e]), after a
Linear layer's bias (`truncf(C + bias)`: torch's addmm under autocast rounds once), or as a chain of additions
and roundings: fc1's `extf(truncf(C + bias))` (f32 holding bf16 values, the gelu's input; here in place in C's
own buffer), the attention projection's `truncf(extf(x) + extf(truncf(C + bias)))` (the residual stream).
When C starts at zero (`zero_init.filled_value`: the frontend's fill too) and only that op reads it, the bf16
GEMM (`bf16_gemm.py`) applies the same f32 steps (`Contraction.epilogue`) to each whole f32 tile and writes
the op's output through its maps: the same bits, provided the sum is whole when it is rounded, so only where K
fits one K block (`BF16_BLOCKS["kc"]`); a longer K keeps the f32 C and the separate op.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import prod

from mlir import ir
from mlir.dialects import arith, linalg, memref

from slicer.core.linalg_facts import PARALLEL, indexing_maps, input_count, iterator_kinds, projected_dims
from slicer.core.operations import walk_ops

from ..memref_facts import MemAccess, static_strides
from .analysis import Contraction, with_output
from .bf16_gemm import BF16_BLOCKS
from .zero_init import filled_value

_GENERIC, _TRUNCF = linalg.GenericOp.OPERATION_NAME, arith.TruncFOp.OPERATION_NAME
_YIELD, _EXTF, _ADDF = linalg.YieldOp.OPERATION_NAME, arith.ExtFOp.OPERATION_NAME, arith.AddFOp.OPERATION_NAME


@dataclass(frozen=True)
class _Epilogue:
    """What an elementwise op does to a contraction's f32 C (`_epilogue_of`): which of its inputs is C, the
    steps over the f32 value (`Contraction.epilogue`) and the input each "add" step adds, in order."""

    c_input: int
    steps: tuple[str, ...]
    addends: tuple[int, ...]


def _epilogue_of(op: ir.Operation, buffer: ir.Value) -> _Epilogue | None:
    """What `op` does to `buffer` (f32, one of its inputs), when it is a chain the bf16 GEMM can apply to a whole
    f32 tile: all loops parallel, C and the output read through permutations, the other inputs through
    projections (each its own addend), the body a chain from C of `addf` with an addend (`extf` of it when it is
    narrower) and `truncf` to bf16 (followed by `extf` back to f32 when the chain goes on), its result bf16 or,
    after at least one rounding, f32; None otherwise."""
    operands = list(op.operands)
    if op.name != _GENERIC or buffer not in operands[:-1] or len(operands) != input_count(op) + 1:
        return None
    c_input = operands.index(buffer)
    out_type = operands[-1].type
    if not isinstance(out_type, ir.MemRefType) or str(ir.MemRefType(out_type).element_type) not in ("bf16", "f32"):
        return None
    maps = indexing_maps(op)
    if any(kind != PARALLEL for kind in iterator_kinds(op)) or not (maps[c_input].is_permutation and
                                                                   maps[-1].is_permutation):
        return None
    for i, amap in enumerate(maps[:-1]):
        dims = projected_dims(amap)
        if i != c_input and (dims is None or len(set(dims)) != len(dims)):
            return None
    block = op.regions[0].blocks[0]
    args = list(block.arguments)
    widened: dict[ir.Value, int] = {args[i]: i for i in range(len(args) - 1) if i != c_input}
    current, narrow = args[c_input], False  # the chain's value, and whether it is the bf16 one
    steps: list[str] = []
    addends: list[int] = []
    for inner in list(block.operations)[:-1]:
        names = inner.name, [str(v.type) for v in inner.operands], str(inner.results[0].type)
        if inner.name == _EXTF and inner.operands[0] in widened and names[2] == "f32":
            widened[inner.results[0]] = widened.pop(inner.operands[0])
        elif inner.name == _ADDF and not narrow and current in inner.operands and names[2] == "f32":
            other = inner.operands[1] if inner.operands[0] == current else inner.operands[0]
            if other not in widened or str(other.type) != "f32" or widened[other] in addends:
                return None
            addends.append(widened[other])
            steps.append("add")
            current = inner.results[0]
        elif inner.name == _TRUNCF and not narrow and inner.operands[0] == current and names[2] == "bf16":
            current, narrow = inner.results[0], True
        elif inner.name == _EXTF and narrow and inner.operands[0] == current and names[2] == "f32":
            current, narrow = inner.results[0], False
            steps.append("round")
        else:
            return None
    last = list(block.operations)[-1]
    if last.name != _YIELD or last.operands[0] != current:
        return None
    if str(ir.MemRefType(out_type).element_type) == "f32" and (narrow or "round" not in steps):
        return None
    if set(addends) != set(widened.values()):  # an input the chain does not add
        return None
    return _Epilogue(c_input, tuple(steps), tuple(addends))


def rounding_epilogue(c: Contraction) -> tuple[ir.Operation, Contraction] | None:
    """(the epilogue op, `c` writing into its output and applying its steps) when `c`'s f32 C starts at zero, its
    only reader is an epilogue (`_epilogue_of`) and it is a local buffer or the epilogue's own output (in place),
    and K fits one K block of the bf16 GEMM; None otherwise."""
    if c.element != "f32" or not c.zero_init or prod(c.ranges[d] for d in c.k) > BF16_BLOCKS["kc"]:
        return None
    buffer = c.output.value
    readers = []
    for use in buffer.uses:
        user = use.owner.operation
        if user == c.op.operation:
            continue
        if _epilogue_of(user, buffer) is not None:
            readers += [] if user in readers else [user]  # an epilogue in place uses C twice
        elif not _fills(user, buffer):
            return None
    if len(readers) != 1 or readers[0].block != c.op.operation.block:
        return None
    rounding = readers[0]
    found = _epilogue_of(rounding, buffer)
    owner = None if isinstance(buffer, ir.BlockArgument) else buffer.owner
    local = owner is not None and owner.name == memref.AllocOp.OPERATION_NAME
    maps = indexing_maps(rounding)
    # C is a local buffer, or the epilogue's own output, written in place element by element
    if found is None or not (local or (rounding.operands[-1] == buffer and maps[found.c_input] == maps[-1])):
        return None
    between = _between(c.op.operation, rounding)
    others = [v for i, v in enumerate(rounding.operands) if i != found.c_input]
    # the GEMM writes the output (and reads the addends) earlier than the epilogue did: they must exist by then
    # and nothing in between may touch them
    if between is None or any(_touched(between, v) or not _defined_before(v, c.op.operation) for v in others):
        return None
    read, written = projected_dims(maps[found.c_input]), projected_dims(maps[-1])
    if read is None or written is None:  # not a projection of the loop dims: not a rounding of C as it is
        return None

    def access(value: ir.Value, loops) -> MemAccess | None:
        """`value` read or written at the epilogue's `loops`, as an access by `c`'s loop dims: epilogue loop l
        is C's dim k where read[k] == l, which is `c`'s loop c.output.dims[k]."""
        strides = static_strides(ir.MemRefType(value.type))
        if strides is None or not ir.MemRefType(value.type).has_static_shape or loops is None:
            return None
        return MemAccess(value, ir.MemRefType(value.type), tuple(c.output.dims[read.index(lo)] for lo in loops),
                         strides)

    stored = access(rounding.operands[-1], written)
    if any(rounding.operands[i] == rounding.operands[-1] and maps[i] != maps[-1] for i in found.addends):
        return None  # an addend read elsewhere than the GEMM writes it (tile by tile)
    addends = [access(rounding.operands[i], projected_dims(maps[i])) for i in found.addends]
    if stored is None or any(a is None for a in addends):
        return None
    fused = with_output(c, stored, str(ir.MemRefType(rounding.operands[-1].type).element_type))
    n0 = fused.n[-1]
    for a in addends:
        if a is not None and n0 in a.dims and (a.dims[-1] != n0 or a.strides[-1] != 1):
            return None  # the epilogue reads an addend in vectors along N0, or one value for a whole row
    return rounding, replace(fused, addends=tuple(a for a in addends if a is not None), epilogue=found.steps)


def _fills(user: ir.Operation, buffer: ir.Value) -> bool:
    """Whether `user` only writes one value into `buffer` (the zero fill before the contraction)."""
    return user.operands[-1] == buffer and filled_value(user) is not None


def _defined_before(value: ir.Value, op: ir.Operation) -> bool:
    """Whether `value` is a block argument or the result of an op earlier in `op`'s block (usable by `op`)."""
    if isinstance(value, ir.BlockArgument):
        return True
    owner = value.owner.operation
    for earlier in op.block.operations:
        earlier = earlier.operation
        if earlier == op:
            return False
        if earlier == owner:
            return True
    return False


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
