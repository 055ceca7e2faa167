"""Sessions on the simulator (ranks=None): state kept between steps, results fed back by name, bad input."""

import numpy as np
import pytest
from session_programs import STEP, compiled, data, expected

import slicer
from slicer.core.errors import RunError


@pytest.fixture(scope="module")
def prog():
    return compiled()


def test_the_state_stays_and_is_replaced_by_the_result_of_the_same_name(prog):
    x, w0 = data()
    outs, w_final = expected(x, w0, 3)
    with prog.session(state={"w": w0}) as s:
        for want in outs:
            np.testing.assert_allclose(s.step(x), want, rtol=1e-5)
        assert s.steps == 3
        state = s.state_dict()
    assert list(state) == ["w"]
    np.testing.assert_array_equal(state["w"], w_final)
    np.testing.assert_array_equal(w0, data()[1])  # the caller's array is not written


def test_state_by_position(prog):
    x, w0 = data()
    with prog.session(state={1: w0}) as s:
        np.testing.assert_allclose(s.step(x), x @ w0, rtol=1e-5)


@pytest.mark.parametrize("state, match", [
    ({"v": np.zeros((4, 4), np.float32)}, "not an argument"),
    ({"w": np.zeros((4, 3), np.float32)}, r"must be float32\[4, 4\]"),
    ({"w": np.zeros((4, 4), np.float64)}, r"must be float32\[4, 4\]"),
])
def test_bad_state_is_refused(prog, state, match):
    with pytest.raises(RunError, match=match):
        prog.session(state=state)


def test_bad_batches_are_refused(prog):
    x, w0 = data()
    with prog.session(state={"w": w0}) as s:
        with pytest.raises(RunError, match=r"takes 1 input\(s\) \(x\), got 2"):
            s.step(x, x)
        with pytest.raises(RunError, match=r"input 'x' must be float32\[8, 4\]"):
            s.step(x[:4])


def test_a_session_with_the_wrong_number_of_ranks_is_refused(prog):
    with pytest.raises(RunError, match="ranks=2"):
        prog.session(ranks=3, state={"w": data()[1]})


def test_a_result_laid_out_unlike_its_argument_is_refused_on_ranks():
    prog = slicer.compile(STEP, mesh=slicer.Mesh(x=2), tactics=[
        slicer.Tile(arg="w", dim=0, axes="x"), slicer.Replicate(result="w")])
    with pytest.raises(RunError, match="result 'w' replaces argument 'w' but is laid out as"):
        prog.session(ranks=2, state={"w": data()[1]})
