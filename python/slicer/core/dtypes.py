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

import functools

import numpy as np

ELEMENT_TYPE_NAMES = ("bf16", "f16", "f32", "f64", "i1", "i8", "i16", "i32", "i64")
"""Every element type Slicer supports, as MLIR prints it."""
_NATIVE_DTYPES: dict[str, np.dtype] = {
    name: np.dtype(dtype)
    for name, dtype in (("f16", np.float16), ("f32", np.float32), ("f64", np.float64), ("i1", np.bool_),
                        ("i8", np.int8), ("i16", np.int16), ("i32", np.int32), ("i64", np.int64))
}
_NATIVE_ELEMENT_TYPES: dict[np.dtype, str] = {dtype: name for name, dtype in _NATIVE_DTYPES.items()}
_BFLOAT16_NAME = "bfloat16"
"""numpy's name of ml_dtypes' bfloat16 (its `.name`, and what `np.dtype(text)` reads once ml_dtypes is loaded)."""

#: The floating-point element types, narrowest first.
FLOAT_TYPES = ("bf16", "f16", "f32", "f64")
#: The float types whose sums accumulate in f32 (see the module docstring).
NARROW_FLOATS = ("bf16", "f16")


@functools.cache
def bfloat16() -> np.dtype:
    """ml_dtypes' bfloat16, loaded on first use: importing ml_dtypes costs a noticeable part of a second of CPU
    (its extension registers
    every type it has), which every process (each `slicer-opt`, each rank) would pay whether or not it meets a
    bf16 value. A process that holds a bf16 array has loaded it already."""
    import ml_dtypes  # costly: see above (test_layers allows it)

    return np.dtype(ml_dtypes.bfloat16)


def numpy_dtype(element_type: str) -> np.dtype | None:
    """The numpy dtype of an MLIR element type name (`"f32"`), or None if Slicer does not support it."""
    element_type = str(element_type)
    return bfloat16() if element_type == "bf16" else _NATIVE_DTYPES.get(element_type)


def element_type(dtype) -> str | None:
    """The MLIR element type name of a numpy dtype, or None."""
    try:
        dtype = np.dtype(dtype)
    except TypeError:  # not a dtype at all
        return None
    if dtype.kind == "V" and dtype.name == _BFLOAT16_NAME and dtype.names is None:
        return "bf16" if dtype == bfloat16() else None
    return _NATIVE_ELEMENT_TYPES.get(dtype)


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
    return _NATIVE_DTYPES["f32"] if element_type(dtype) in NARROW_FLOATS else np.dtype(dtype)


def sum_blocks(blocks, dtype=None) -> np.ndarray:
    """The element-wise sum of equally shaped blocks in their order, accumulated in `accumulation_dtype` and
    rounded once to the blocks' dtype: the one rule every simulated or shared-memory sum follows."""
    dtype = np.dtype(dtype if dtype is not None else blocks[0].dtype)
    if accumulation_dtype(dtype) == dtype:
        return np.sum(blocks, axis=0, dtype=dtype)
    out = np.empty(np.shape(blocks[0]), dtype)
    sum_into(blocks, out)
    return out


def sum_into(rows, out: np.ndarray) -> None:
    """`out` = the sum of `rows` (arrays of `out`'s shape and dtype, a narrow float) in their order, in f32,
    rounded once. bf16 widens by a shift of its bits (exact, and faster for the whole sum than numpy's casting
    inside `np.add.reduce`)."""
    wide = accumulation_dtype(out.dtype)
    if element_type(out.dtype) != "bf16":
        np.copyto(out, np.add.reduce(rows, axis=0, dtype=wide), casting="unsafe")
        return
    total, term = np.empty(out.shape, wide), np.empty(out.shape, wide)
    for index, row in enumerate(rows):
        target = total if index == 0 else term
        np.left_shift(np.asarray(row).view(np.uint16), 16, out=target.view(np.uint32), dtype=np.uint32)
        if index:
            total += term
    np.copyto(out, total, casting="unsafe")


def dtype_text(dtype) -> str:
    """A dtype as text that `parse_dtype` reads back (checkpoint manifests, job files): numpy's `.str` ("<f4"),
    except for bfloat16, whose `.str` is a raw "<V2", named "bfloat16" (what ml_dtypes registers)."""
    dtype = np.dtype(dtype)
    return dtype.name if dtype.kind == "V" and element_type(dtype) is not None else dtype.str


def parse_dtype(text: str) -> np.dtype:
    """The dtype `dtype_text` wrote ("bfloat16": ml_dtypes' type, loaded for it)."""
    return bfloat16() if text == _BFLOAT16_NAME else np.dtype(text)


def from_npy(array: np.ndarray, dtype=None) -> np.ndarray:
    """An array read from a .npy file as the dtype it was written in: numpy writes bfloat16 as 2-byte raw voids
    ("|V2"), read back here as `dtype` (default bf16) over the same bytes; other arrays are returned as they are."""
    if array.dtype.kind == "V" and array.dtype.names is None:
        want = bfloat16() if dtype is None else np.dtype(dtype)
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
    return (f"element type {element_type} is not supported; supported: {', '.join(ELEMENT_TYPE_NAMES)} "
            "(convert the program's tensors to one of them, e.g. f32 or bf16)")
