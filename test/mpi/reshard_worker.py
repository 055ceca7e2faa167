"""Run under mpiexec by test_reshard_mpi.py: a session inside the user's own MPI job resharded from w replicated
on x=2 to w's rows split over y=2 (another mesh) and back, stepping on after each switch."""

import sys

import numpy as np

sys.path.insert(0, sys.argv[1])  # test/unit/runtime: the session test program

from session_programs import STEP, data, expected

import slicer


def program(axis: str, split_w: bool):
    tactics = [slicer.Tile(arg="x", dim=0, axes=axis)]
    if split_w:
        tactics += [slicer.Tile(arg="w", dim=0, axes=axis), slicer.Tile(result=1, dim=0, axes=axis)]
    return slicer.compile(STEP, mesh=slicer.Mesh(**{axis: 2}), tactics=tactics)


def main():
    x, w0 = data()
    outs, w_final = expected(x, w0, 3)
    s = program("x", False).session(state={"w": w0})
    np.testing.assert_allclose(s.step(x), outs[0], rtol=1e-5)
    s = s.reshard(program("y", True))
    assert str(s.plan.graph.values[s.plan.graph.args[1]].dist).startswith("[[y]")
    np.testing.assert_array_equal(s.state_dict()["w"], w0 * 2)
    np.testing.assert_allclose(s.step(x), outs[1], rtol=1e-5)
    s = s.reshard(program("x", False))
    np.testing.assert_allclose(s.step(x), outs[2], rtol=1e-5)
    np.testing.assert_array_equal(s.state_dict()["w"], w_final)
    s.close()
    print("reshard ok")


main()
