"""The one table between MLIR element types and numpy dtypes (JIT, AOT kernels, kernel graph, planner, report,
runtime, checkpoints).

Element types are named as MLIR prints them (`f32`, `bf16`, `i1`, ...). `i1` tensors are numpy booleans (one byte
per element in buffers). `bf16` (bfloat16: f32's sign and 8-bit exponent, 7 stored mantissa bits) is
`ml_dtypes.bfloat16`, the numpy dtype JAX uses; numpy itself has none. Its numpy kind is "V" (not "f"), so code
asks `is_float` here rather than `np.issubdtype(dtype, np.floating)`.

Sums of the narrow floats (f16, bf16) accumulate in f32 and round once (`accumulation_dtype`): the simulator,
the shared-memory collectives and the MPI collectives all do, so a sum over k devices loses no more than one
rounding whatever k is.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

NUMPY_DTYPES: dict[str, np.dtype] = {
    name: np.dtype(dtype)
    for name, dtype in (("bf16", ml_dtypes.bfloat16), ("f16", np.float16), ("f32", np.float32), ("f64", np.float64),
                        ("i1", np.bool_), ("i8", np.int8), ("i16", np.int16), ("i32", np.int32), ("i64", np.int64))
}
ELEMENT_TYPES: dict[np.dtype, str] = {dtype: name for name, dtype in NUMPY_DTYPES.items()}

#: The floating-point element types, narrowest first.
FLOAT_TYPES = ("bf16", "f16", "f32", "f64")
#: The float types whose sums accumulate in f32 (see the module docstring).
NARROW_FLOATS = ("bf16", "f16")


def numpy_dtype(element_type: str) -> np.dtype | None:
    """The numpy dtype of an MLIR element type name (`"f32"`), or None if Slicer does not support it."""
    return NUMPY_DTYPES.get(str(element_type))


def element_type(dtype) -> str | None:
    """The MLIR element type name of a numpy dtype, or None."""
    try:
        return ELEMENT_TYPES.get(np.dtype(dtype))
    except TypeError:  # not a dtype at all
        return None


def byte_size(element_type: str) -> int | None:
    """Bytes per element of an element type in buffers (i1: 1), or None if Slicer does not support it."""
    dtype = numpy_dtype(element_type)
    return None if dtype is None else dtype.itemsize


def is_float(dtype) -> bool:
    """True for the floating-point numpy dtypes Slicer knows, bfloat16 included (whose kind is not "f")."""
    return element_type(dtype) in FLOAT_TYPES or np.issubdtype(np.dtype(dtype), np.floating)


def accumulation_dtype(dtype) -> np.dtype:
    """The dtype a sum of `dtype` values accumulates in: f32 for the narrow floats (rounded once at the end),
    the dtype itself otherwise."""
    return NUMPY_DTYPES["f32"] if element_type(dtype) in NARROW_FLOATS else np.dtype(dtype)


def sum_blocks(blocks, dtype=None) -> np.ndarray:
    """The element-wise sum of equally shaped blocks in their order, accumulated in `accumulation_dtype` and
    rounded once to the blocks' dtype: the one rule every simulated or shared-memory sum follows."""
    dtype = np.dtype(dtype if dtype is not None else blocks[0].dtype)
    wide = accumulation_dtype(dtype)
    total = np.sum(blocks, axis=0, dtype=wide)
    return total if wide == dtype else total.astype(dtype)


def dtype_text(dtype) -> str:
    """A dtype as text that `parse_dtype` reads back (checkpoint manifests, job files): numpy's `.str` ("<f4"),
    except for bfloat16, whose `.str` is a raw "<V2", named "bfloat16" (what ml_dtypes registers)."""
    dtype = np.dtype(dtype)
    return dtype.name if dtype.kind == "V" and element_type(dtype) is not None else dtype.str


def parse_dtype(text: str) -> np.dtype:
    """The dtype `dtype_text` wrote ("bfloat16" resolves because this module imported ml_dtypes)."""
    return np.dtype(text)


def from_npy(array: np.ndarray, dtype=None) -> np.ndarray:
    """An array read from a .npy file as the dtype it was written in: numpy writes bfloat16 as 2-byte raw voids
    ("|V2"), read back here as `dtype` (default bf16) over the same bytes; other arrays are returned as they are."""
    if array.dtype.kind == "V" and array.dtype.names is None:
        want = NUMPY_DTYPES["bf16"] if dtype is None else np.dtype(dtype)
        if want.itemsize == array.dtype.itemsize and element_type(want) is not None:
            return array.view(want)
    return array


def conversion_hint(dtype) -> str:
    """How a user makes an array of `dtype`, for messages about a wrong one: said for bf16, which numpy lacks."""
    if element_type(dtype) == "bf16":
        return " (numpy: array.astype(ml_dtypes.bfloat16); torch: tensor.bfloat16())"
    return ""


def unsupported(element_type: str) -> str:
    """Why `element_type` is not supported, and what is."""
    return (f"element type {element_type} is not supported; supported: {', '.join(NUMPY_DTYPES)} "
            "(convert the program's tensors to one of them, e.g. f32 or bf16)")
