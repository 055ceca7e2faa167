"""The element type table (slicer.core.dtypes): bf16 as ml_dtypes.bfloat16, byte sizes, narrow-float sums in
f32, the comparison's tolerances per dtype, and the message for what is not supported."""

import ml_dtypes
import numpy as np
import pytest

from slicer.core import compare, dtypes

BF16 = np.dtype(ml_dtypes.bfloat16)


def test_table_round_trips_and_sizes():
    assert dtypes.numpy_dtype("bf16") == BF16 and dtypes.element_type(BF16) == "bf16"
    assert {t: dtypes.byte_size(t) for t in ("bf16", "f16", "f32", "f64", "i1", "i64")} == \
        {"bf16": 2, "f16": 2, "f32": 4, "f64": 8, "i1": 1, "i64": 8}
    for name in dtypes.ELEMENT_TYPE_NAMES:
        assert dtypes.element_type(dtypes.numpy_dtype(name)) == name
    assert dtypes.byte_size("f8E4M3FN") is None and dtypes.element_type("not a dtype") is None


def test_is_float_knows_bfloat16():
    assert BF16.kind == "V"  # why the table, not np.issubdtype, says it is a float
    assert all(dtypes.is_float(dtypes.numpy_dtype(t)) for t in dtypes.FLOAT_TYPES)
    assert not any(dtypes.is_float(dtypes.numpy_dtype(t)) for t in ("i1", "i8", "i32"))


def test_narrow_float_sums_accumulate_in_f32_and_round_once():
    # 1 + 2^-8 + 2^-8: in bf16 step by step each 2^-8 is lost (ties to even), in f32 they add up to 2^-7
    blocks = [np.ones(3, BF16), np.full(3, 2.0 ** -8, BF16), np.full(3, 2.0 ** -8, BF16)]
    stepwise = (blocks[0] + blocks[1]) + blocks[2]
    assert float(stepwise[0]) == 1.0
    total = dtypes.sum_blocks(blocks)
    assert total.dtype == BF16 and float(total[0]) == 1.0 + 2.0 ** -7
    assert dtypes.accumulation_dtype(np.float16) == np.float32 and dtypes.accumulation_dtype(np.int32) == np.int32
    ints = [np.arange(4, dtype=np.int64)] * 3
    assert dtypes.sum_blocks(ints).dtype == np.int64 and list(dtypes.sum_blocks(ints)) == [0, 3, 6, 9]


def test_unsupported_lists_what_is():
    message = dtypes.unsupported("f8E4M3FN")
    assert message.startswith("element type f8E4M3FN is not supported; supported: bf16, f16, f32, f64, i1, i8")
    assert "convert" in message


def test_comparison_tolerances_follow_the_dtype():
    assert compare.tolerances(np.float32) == (compare.RTOL, compare.ATOL)
    rtol, atol = compare.tolerances(BF16)
    assert rtol == atol == 4 * 2.0 ** -7
    expected = np.linspace(1, 2, 64).astype(BF16)
    off_by_one_ulp = (expected.astype(np.float32) * (1 + 2.0 ** -7)).astype(BF16)
    assert compare.same_result(expected, off_by_one_ulp)
    assert not compare.same_result(expected, (expected.astype(np.float32) * 1.1).astype(BF16))
    assert not compare.same_result(expected.astype(np.float32), off_by_one_ulp.astype(np.float32))
    assert compare.same_exactly(expected, expected.copy()) and not compare.same_exactly(expected, off_by_one_ulp)
    nan = np.array([np.nan, 1.0], BF16)
    assert compare.same_exactly(nan, nan.copy()) and compare.same_result(nan, nan.copy())


@pytest.mark.parametrize("name", ["bf16", "f16"])
def test_random_inputs_of_narrow_floats_are_floats(name):
    from slicer.runtime.execution.blocks import random_values
    values = random_values(3, (64,), (slice(None),), dtypes.numpy_dtype(name))
    assert values.dtype == dtypes.numpy_dtype(name) and len(np.unique(values.astype(np.float32))) > 32
