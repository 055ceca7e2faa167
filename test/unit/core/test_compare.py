"""The one result comparison (slicer.core.compare) that --check-each-step, the oracle and slicer-run --check use."""

import numpy as np
import pytest

from slicer.core.compare import difference, max_difference, same_exactly, same_result


def test_integers_are_exact():
    a = np.array([1, 2, 3], np.int32)
    assert same_result(a, a.copy())
    assert not same_result(a, np.array([1, 2, 4], np.int32))
    assert not same_result(np.array([True, False]), np.array([True, True]))


def test_floats_within_a_tolerance_scaled_by_magnitude():
    big = np.array([1e6, 1.0], np.float32)
    assert same_result(big, big + np.float32(5.0))  # within 1e-5 * 1e6 absolute
    assert not same_result(big, big + np.float32(50.0))
    small = np.array([1.0, 2.0])
    assert same_result(small, small * (1 + 1e-5))
    assert not same_result(small, small + 1e-3)


@pytest.mark.parametrize("got, same", [
    ([1.0, np.nan, np.inf], True),       # NaN equals NaN, inf equals inf, at the same place
    ([1.0, 2.0, np.inf], False),         # a number where NaN was
    ([np.nan, np.nan, np.inf], False),   # NaN where a number was
    ([1.0, np.nan, -np.inf], False),     # the other infinity
])
def test_nan_rule(got, same):
    expected = np.array([1.0, np.nan, np.inf])
    got = np.array(got)
    assert same_result(expected, got) is same
    assert (max_difference(expected, got) == 0.0) is same
    assert same_exactly(expected, got) is same


def test_an_infinity_does_not_widen_the_tolerance():
    assert not same_result(np.array([np.inf, 1.0]), np.array([np.inf, 2.0]))


def test_shapes_and_messages():
    assert not same_result(np.zeros(3), np.zeros(4))
    assert difference(np.zeros(3), np.zeros(4)) == "shape [4] instead of [3]"
    assert difference(np.array([1.0, np.nan]), np.array([1.5, 0.0])) == "max |diff| 0.5; 1 NaN/inf in different places"
    assert max_difference(np.zeros(0), np.zeros(0)) == 0.0
