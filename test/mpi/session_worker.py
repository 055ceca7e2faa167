"""Run under mpiexec by test_session_mpi.py: a training-style session inside the user's own MPI job."""

import sys

import numpy as np

sys.path.insert(0, sys.argv[1])  # test/unit/runtime: the session test program

from session_programs import compiled, data, expected


def main():
    prog = compiled()
    x, w0 = data()
    outs, w_final = expected(x, w0, 3)
    with prog.session(state={"w": w0}) as s:
        for want in outs:
            np.testing.assert_allclose(s.step(x), want, rtol=1e-5)  # every rank gets the result
        np.testing.assert_array_equal(s.state_dict()["w"], w_final)
    print("session ok")


main()
