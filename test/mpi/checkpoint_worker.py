"""Run under mpiexec by test_checkpoint_mpi.py: a session inside the user's MPI job saves its state (w's rows
split over x=2: each rank writes its block) and another session, w replicated, loads it; a damaged
checkpoint is refused on every rank alike."""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, sys.argv[1])  # test/unit/runtime: the session test program

from session_programs import STEP, compiled, data, expected

import slicer
from slicer.core.errors import CheckpointError


def main(directory: Path):
    x, w0 = data()
    outs, _ = expected(x, w0, 3)
    split = slicer.compile(STEP, mesh=slicer.Mesh(x=2), tactics=[
        slicer.Tile(arg="w", dim=0, axes="x"), slicer.Tile(result="w", dim=0, axes="x")])
    with split.session(state={"w": w0}) as s:
        s.step(x)
        s.save(directory)
        at_save = s.state_dict()
    with compiled().session(state={"w": np.zeros_like(w0)}) as s:
        s.load(directory)
        assert s.steps == 1 and np.array_equal(s.state_dict()["w"], at_save["w"])
        np.testing.assert_allclose(s.step(x), outs[1], rtol=1e-5)
        copy = directory.with_name("damaged")
        if s.comm.Get_rank() == 0:
            copy.mkdir()
            for p in directory.iterdir():
                (copy / p.name).write_bytes(p.read_bytes()[:-1] if p.name == "001.w.r1.npy" else p.read_bytes())
        s.comm.Barrier()
        try:
            s.load(copy)
            raise AssertionError("a truncated block was loaded")
        except CheckpointError as exc:
            assert "rank 0: checkpoint" in str(exc) and "001.w.r1.npy" in str(exc), exc
        assert np.array_equal(s.state_dict()["w"], at_save["w"] * 2)
    print("checkpoint ok")


main(Path(sys.argv[2]))
