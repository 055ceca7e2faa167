"""The one table between MLIR element types and numpy dtypes (JIT, AOT kernels, kernel graph, planner, report).

Element types are named as MLIR prints them (`f32`, `i1`, ...). `i1` tensors are numpy booleans (one byte per
element in buffers). bf16 is absent: numpy has no native bfloat16.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

NUMPY_DTYPES: dict[str, np.dtype] = {
    name: np.dtype(dtype)
    for name, dtype in (("f16", np.float16), ("f32", np.float32), ("f64", np.float64), ("i1", np.bool_),
                        ("i8", np.int8), ("i16", np.int16), ("i32", np.int32), ("i64", np.int64),
                        ("bf16", ml_dtypes.bfloat16))
}
ELEMENT_TYPES: dict[np.dtype, str] = {dtype: name for name, dtype in NUMPY_DTYPES.items()}


def numpy_dtype(element_type: str) -> np.dtype | None:
    """The numpy dtype of an MLIR element type name (`"f32"`), or None if Slicer does not support it."""
    return NUMPY_DTYPES.get(str(element_type))


def element_type(dtype) -> str | None:
    """The MLIR element type name of a numpy dtype, or None."""
    return ELEMENT_TYPES.get(np.dtype(dtype))


def unsupported(element_type: str) -> str:
    """Why `element_type` is not supported, and what is."""
    hint = " (numpy has no bfloat16: use f16 or f32)" if element_type == "bf16" else ""
    return f"element type {element_type} is not supported{hint}; supported: {', '.join(NUMPY_DTYPES)}"
