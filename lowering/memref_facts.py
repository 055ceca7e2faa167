"""What the kernel generators (`contract/`, `rows/`) read of a bufferized `linalg.generic`'s memref operands,
and the target sizes they measure them against.

The op's own facts (indexing maps, iterator kinds, the `combine(out, x)` form of its body) are
`slicer.core.linalg_facts`, shared with the rule table. What only code generation asks is here: each memref
operand's static strides next to the loop dim of each of its dims (`MemAccess`), element sizes, the
vector register's width (`VECTOR_BYTES`, AVX-512) and the size from which a buffer written once gets
non-temporal stores (`NT_BYTES`). Each generator raises its own `Unsupported` subclass when an answer is "no".
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

VECTOR_BYTES = 64
"""Bytes of one vector register (AVX-512): generated loops run on `vector<(64 / element bytes) x T>`."""
NT_BYTES = 16 << 20
"""Outputs at least this large, written once, get non-temporal stores (half the L3 here)."""


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
