"""How ranks run collectives is an argument of a run or a session (`collectives=`, `overlap=`); the environment
only gives its default (SLICER_COLLECTIVES, SLICER_OVERLAP), and a value that means nothing is an OptionError
naming the argument or the variable. (The MPI side: test/mpi/test_overlap_mpi.py runs with the argument against
the opposite default.)"""

import numpy as np
import pytest

import slicer
from slicer.core.errors import OptionError
from slicer.runtime import RunOptions
from slicer.runtime.state.loaded_programs import program_key


def test_the_environment_gives_the_default(monkeypatch):
    monkeypatch.delenv("SLICER_COLLECTIVES", raising=False)
    monkeypatch.delenv("SLICER_OVERLAP", raising=False)
    assert RunOptions.chosen() == RunOptions("auto", True)
    monkeypatch.setenv("SLICER_COLLECTIVES", "MPI")
    monkeypatch.setenv("SLICER_OVERLAP", "0")
    assert RunOptions.chosen() == RunOptions("mpi", False)


def test_the_argument_wins_over_the_variable(monkeypatch):
    monkeypatch.setenv("SLICER_COLLECTIVES", "mpi")
    monkeypatch.setenv("SLICER_OVERLAP", "0")
    assert RunOptions.chosen("shm", True) == RunOptions("shm", True)
    monkeypatch.setenv("SLICER_COLLECTIVES", "nccl")  # a bad default is not read when the argument is given
    monkeypatch.setenv("SLICER_OVERLAP", "sometimes")
    assert RunOptions.chosen("auto", False) == RunOptions("auto", False)


@pytest.mark.parametrize("given,variable,says", [
    ({"collectives": "nccl"}, {}, "collectives='nccl'"),
    ({"overlap": "yes"}, {}, "overlap='yes'"),
    ({}, {"SLICER_COLLECTIVES": "nccl"}, "SLICER_COLLECTIVES='nccl'"),
    ({}, {"SLICER_OVERLAP": "sometimes"}, "SLICER_OVERLAP='sometimes'"),
])
def test_a_bad_value_says_which_and_what_it_takes(monkeypatch, given, variable, says):
    for name, text in variable.items():
        monkeypatch.setenv(name, text)
    with pytest.raises(OptionError) as caught:
        RunOptions.chosen(**given)
    assert says in str(caught.value)
    assert ("auto, mpi, shm" in str(caught.value)) == ("collectives" in says.lower())


def test_run_and_session_refuse_a_bad_value_before_running():
    prog = slicer.compile("""
func.func @f(%a: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %e = tensor.empty() : tensor<4x4xf32>
  %r = linalg.add ins(%a, %a : tensor<4x4xf32>, tensor<4x4xf32>) outs(%e : tensor<4x4xf32>) -> tensor<4x4xf32>
  return %r : tensor<4x4xf32>
}""", mesh=slicer.Mesh(x=2), tactics=slicer.parse_tactics("arg0.0=x"))
    a = np.ones((4, 4), np.float32)
    with pytest.raises(OptionError, match="collectives='nccl'"):
        prog.run(a, collectives="nccl")
    with pytest.raises(OptionError, match="overlap=1"):
        prog.session(overlap=1)
    np.testing.assert_array_equal(prog.run(a, collectives="mpi", overlap=False), a + a)


def test_a_program_kept_under_other_options_is_another_program():
    keys = {program_key("{}", {}, ("a",), RunOptions(c, o)) for c in ("auto", "mpi", "shm") for o in (True, False)}
    assert len(keys) == 6
