"""The one rule for "these results are the same": used by `--check-each-step` (slicer.checking), the test
oracle (slicer.runtime.simulation.oracle) and `slicer-run --check`. Pure numpy.

- Shapes must be equal.
- Integers and booleans must be equal exactly.
- Floats must be close: |got - expected| <= rtol * |expected| + atol * scale, where `scale` is the largest
  finite |expected| (at least 1), so a tolerance fits results of any magnitude. NaN equals NaN at the same
  place; an infinity equals the same infinity at the same place; NaN or an infinity anywhere else is a
  mismatch.
- Narrow floats (bf16, f16) widen the tolerances to a few units of their last place (`tolerances`): bf16 keeps
  8 significant bits, so two correct programs that round in different places differ by ~1e-2 relative.
"""

from __future__ import annotations

import numpy as np

from . import dtypes

#: The default tolerances of every comparison: relative, and absolute per unit of the result's magnitude.
RTOL = 1e-4
ATOL = 1e-5


def _is_float(array: np.ndarray) -> bool:
    return dtypes.is_float(array.dtype)


def tolerances(dtype, rtol: float = RTOL, atol: float = ATOL) -> tuple[float, float]:
    """`(rtol, atol)` for results of `dtype`: the given ones, widened to 4 units in the last place of a narrow
    float (bf16: 2^-7 * 4 = 0.031; f16: 0.0039)."""
    if dtypes.element_type(dtype) in dtypes.NARROW_FLOATS:
        eps = 4 * float(np.finfo(np.dtype(dtype)).eps)
        return max(rtol, eps), max(atol, eps)
    return rtol, atol


def _scale(expected: np.ndarray) -> float:
    """The largest finite magnitude of `expected`, at least 1."""
    finite = np.isfinite(expected)
    return max(1.0, float(np.abs(expected[finite]).max())) if finite.any() else 1.0


def same_result(expected: np.ndarray, got: np.ndarray, *, rtol: float = RTOL, atol: float = ATOL) -> bool:
    """True if `got` is `expected` under the module's rule (shape, exact integers, close floats, NaN = NaN)."""
    expected, got = np.asarray(expected), np.asarray(got)
    if expected.shape != got.shape:
        return False
    if not (_is_float(expected) or _is_float(got)):
        return bool(np.array_equal(expected, got))
    narrow = expected.dtype if expected.dtype.itemsize <= got.dtype.itemsize else got.dtype
    rtol, atol = tolerances(narrow, rtol, atol)
    expected, got = _widened(expected), _widened(got)
    return bool(np.allclose(got, expected, rtol=rtol, atol=atol * _scale(expected), equal_nan=True))


def _widened(array: np.ndarray) -> np.ndarray:
    """A float array numpy's own functions take: bfloat16 (not a numpy float kind) as float32, exactly."""
    return array.astype(np.float32) if _is_float(array) and not np.issubdtype(array.dtype, np.floating) else array


def max_difference(expected: np.ndarray, got: np.ndarray) -> float:
    """The largest |got - expected| under the same NaN rule: a NaN (or infinity) matching the same value at the
    same place counts 0, one that does not counts infinity. 0.0 for empty arrays; shapes must be equal."""
    e, g = np.asarray(expected).astype(np.float64), np.asarray(got).astype(np.float64)
    if e.size == 0:
        return 0.0
    same_special = (np.isnan(e) & np.isnan(g)) | (~np.isfinite(e) & (e == g))
    with np.errstate(invalid="ignore"):
        diff = np.where(same_special, 0.0, np.abs(e - g))
    return float(np.max(np.nan_to_num(diff, nan=np.inf)))


def difference(expected: np.ndarray, got: np.ndarray) -> str:
    """How `got` differs from `expected`, for a message: the shape, or the largest finite difference and how
    many NaN/infinities are in different places."""
    expected, got = np.asarray(expected), np.asarray(got)
    if expected.shape != got.shape:
        return f"shape {list(got.shape)} instead of {list(expected.shape)}"
    e, g = expected.astype(np.float64), got.astype(np.float64)
    both = np.isfinite(e) & np.isfinite(g)
    text = f"max |diff| {float(np.max(np.abs(e - g)[both])):.3g}" if both.any() else "no finite values to compare"
    special = ~both & ~((np.isnan(e) & np.isnan(g)) | (e == g))
    return text + (f"; {int(special.sum())} NaN/inf in different places" if special.any() else "")


def same_exactly(expected: np.ndarray, got: np.ndarray) -> bool:
    """True if `got` equals `expected` bit for bit in value (NaN equal to NaN at the same place)."""
    expected, got = np.asarray(expected), np.asarray(got)
    floats = _is_float(expected) and _is_float(got)
    if floats:
        expected, got = _widened(expected), _widened(got)
    return bool(np.array_equal(expected, got, equal_nan=floats))


__all__ = ["ATOL", "RTOL", "difference", "max_difference", "same_exactly", "same_result", "tolerances"]
