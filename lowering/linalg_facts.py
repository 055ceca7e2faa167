"""What the kernel generators (`contract/`, `rows/`) need to know about a bufferized `linalg.generic`, read one way.

A generic's facts live in three places: its `indexing_maps` (which loop dim indexes each dim of each
operand), its `iterator_types` (which loop dims are reductions) and its body (what it computes per
point). The generators ask the same questions of all three: the loop dims of each memref operand and
its static strides (`MemAccess`), the iterator kinds, and whether a yielded value is `combine(out, x)`,
the accumulation form of a contraction (`out + f(inputs)`) or of a reduction (`max(out, x)`). This
module answers them; each generator raises its own `Unsupported` subclass when an answer is "no".

The target's vector width is fixed here too: `VECTOR_BYTES` per vector register (AVX-512) and the
size from which a buffer written once gets non-temporal stores (`NT_BYTES`).
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from slicer.core.names import INDEXING_MAPS_ATTR, ITERATOR_TYPES_ATTR, OPERAND_SEGMENT_SIZES_ATTR

VECTOR_BYTES = 64
"""Bytes of one vector register (AVX-512): generated loops run on `vector<(64 / element bytes) x T>`."""
NT_BYTES = 16 << 20
"""Outputs at least this large, written once, get non-temporal stores (half the L3 here)."""

PARALLEL = "parallel"
REDUCTION = "reduction"


@dataclass
class MemAccess:
    """One memref operand of a generic: its SSA value, type, static strides, and the loop dim of each of its dims."""

    value: ir.Value
    type: ir.MemRefType
    dims: tuple[int, ...]  # loop dim indexing each memref dim
    strides: tuple[int, ...]

    @property
    def type_text(self) -> str:
        return str(self.type)

    def depends(self, dim: int) -> bool:
        """Whether the element read or written changes with loop dim `dim`."""
        return dim in self.dims

    def stride_of(self, dim: int) -> int | None:
        """Stride of loop dim `dim` in this operand (None if it does not depend on it)."""
        total = 0
        found = False
        for d, s in zip(self.dims, self.strides):
            if d == dim:
                total += s
                found = True
        return total if found else None

    def contiguous_along(self, dim: int) -> bool:
        """Whether a vector along loop dim `dim` is one contiguous load: its last memref dim, stride 1."""
        return bool(self.dims) and self.dims[-1] == dim and self.strides[-1] == 1 and self.dims.count(dim) == 1


def indexing_maps(op: ir.Operation) -> list[ir.AffineMap]:
    """The generic's indexing maps, one per operand (inputs, then outputs)."""
    return [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes[INDEXING_MAPS_ATTR])]


def iterator_kinds(op: ir.Operation) -> list[str]:
    """`PARALLEL` or `REDUCTION` for each loop dim of the generic; [] for an op without iterator types."""
    if ITERATOR_TYPES_ATTR not in op.attributes:
        return []
    return [REDUCTION if REDUCTION in str(a) else PARALLEL for a in ir.ArrayAttr(op.attributes[ITERATOR_TYPES_ATTR])]


def input_count(op: ir.Operation) -> int:
    """How many of the op's operands are inputs (the rest are outputs), from its operand segments."""
    return list(ir.DenseI32ArrayAttr(op.attributes[OPERAND_SEGMENT_SIZES_ATTR]))[0]


def has_operand_segments(op: ir.Operation) -> bool:
    """Whether the op splits its operands into groups (a linalg structured op: inputs, then outputs)."""
    return OPERAND_SEGMENT_SIZES_ATTR in op.attributes


def projected_dims(amap: ir.AffineMap) -> tuple[int, ...] | None:
    """The loop dim of each result of `amap`, or None when a result is not a plain loop dim (`d0 + d1`, `0`)."""
    dims = []
    for expr in amap.results:
        try:
            dims.append(ir.AffineDimExpr(expr).position)
        except (ValueError, TypeError):
            return None
    return tuple(dims)


def static_strides(type_: ir.MemRefType) -> tuple[int, ...] | None:
    """The memref's strides, or None when one of them (or the offset's layout) is dynamic."""
    strides, _ = type_.get_strides_and_offset()
    if any(type_.is_dynamic_stride_or_offset(s) for s in strides):
        return None
    return tuple(strides)


def byte_width(type_: ir.Type) -> int | None:
    """Bytes of one element of scalar type `type_` (integers of fewer than 8 bits count 1); None if not a number."""
    if isinstance(type_, ir.IntegerType):
        return max(1, type_.width // 8)
    for cls, width in ((ir.F16Type, 2), (ir.BF16Type, 2), (ir.F32Type, 4), (ir.F64Type, 8)):
        if isinstance(type_, cls):
            return width
    return None


def combined_with(value: ir.Value, accumulator: ir.Value) -> tuple[ir.Operation, ir.Value] | None:
    """(combiner, x) when `value` is `combiner(accumulator, x)` or `combiner(x, accumulator)`, a binary op.

    The accumulation form of a generic's body: a contraction yields `out + f(inputs)` (combiner
    `arith.addf`), a reduction `max(out, x)`; the caller checks the combiner's kind.
    """
    owner = None if isinstance(value, ir.BlockArgument) else value.owner
    if owner is None or len(owner.operands) != 2:
        return None
    lhs, rhs = owner.operands
    if lhs == accumulator:
        return owner, rhs
    if rhs == accumulator:
        return owner, lhs
    return None


def in_body(value: ir.Value, block: ir.Block) -> bool:
    """Whether `value` is defined in `block` (one of its arguments, or a result of one of its ops)."""
    if isinstance(value, ir.BlockArgument):
        return value.owner == block
    owner = value.owner
    return owner.block == block if hasattr(owner, "block") else owner.operation.block == block


def defined_in(value: ir.Value, op: ir.Operation) -> bool:
    """Whether `value` is defined inside `op`'s region (a block argument or a body result)."""
    if isinstance(value, ir.BlockArgument):
        return value.owner.owner.operation == op.operation
    parent = value.owner.operation.parent
    return parent is not None and parent.operation == op.operation
