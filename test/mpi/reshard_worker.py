"""Run under mpiexec by test_reshard_mpi.py: a session inside the user's own MPI job resharded from w replicated
on x=2 to w's rows split over y=2 (another mesh) and back, stepping on after each switch; the session left
refuses steps and closing it leaves the new one running; a program preloaded (`Session.preload`) leaves the
running one as it was and is switched to with the state. Then the programs a rank keeps loaded
(`LoadedPrograms`, capacity 1): a program switched back to is the one kept, with no state, and runs; one more
evicts (closes) the least recently left."""

import sys

import numpy as np

sys.path.insert(0, sys.argv[1])  # test/unit/runtime: the session test program

from session_programs import STEP, data, expected

import slicer
from slicer.core.errors import RunError
from slicer.runtime.state.loaded_programs import LoadedPrograms
from slicer.runtime.state.resident import ResidentRank


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
    old, s = s, s.reshard(program("x", False))
    try:
        old.step(x)
        raise AssertionError("the session left by a reshard stepped")
    except RunError as exc:
        assert "resharded" in str(exc)
    old.close()  # handed over: the new session's programs stay open
    split = program("x", True)
    assert s.preload(split) and not s.preload(split)  # loaded beside the running one, then held
    np.testing.assert_allclose(s.step(x), outs[2], rtol=1e-5)  # the running program and its state untouched
    np.testing.assert_array_equal(s.state_dict()["w"], w_final)
    s = s.reshard(split)  # the preloaded program: only the state moves
    np.testing.assert_array_equal(s.state_dict()["w"], w_final)
    s.close()
    kept_programs(x, w0)
    print("reshard ok")


def kept_programs(x, w0):
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    graphs = [program(axis, split).session_plan(["w"]) for axis, split in (("x", False), ("y", True), ("x", True))]
    kept = LoadedPrograms(capacity=1)
    made = [ResidentRank(p.graph, comm, feeds=p.feeds, names=p.arg_names) for p in graphs]
    assert kept.switch("a", made[0]) is made[0]
    made[0].put({1: graphs[0].block(w0, 1, comm.rank)})
    assert kept.switch("b", made[1]) is made[1] and kept.running is made[1]
    assert "a" in kept and "b" in kept and kept.switch("a") is made[0] and made[0].resident == {}
    made[0].put({1: graphs[0].block(w0, 1, comm.rank)})
    y = made[0].step({0: graphs[0].block(x, 0, comm.rank)})  # the kept program runs as loaded
    assert y and all(np.isfinite(block).all() for block in y.values())
    assert kept.switch("c", made[2]) is made[2] and "b" not in kept and "a" in kept  # b left first: closed
    assert kept.switch("b") is None and kept.running is made[2]
    preloaded = ResidentRank(graphs[1].graph, comm, feeds=graphs[1].feeds, names=graphs[1].arg_names)
    kept.keep("b", preloaded)  # capacity 1: "a", left longest ago, closed
    assert "a" not in kept and kept.running is made[2] and kept.switch("b") is preloaded
    kept.close()
    assert len(kept) == 0 and kept.running is None


main()
