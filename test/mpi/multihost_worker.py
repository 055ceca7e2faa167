"""Run by test_multihost.py under the two hosts' mpiexec (`mpiexec -n 4 python multihost_worker.py MLP`): the
in-job mode across hosts. Every rank runs a session of the MLP forward (w1's columns split over x, the axis
across the hosts), checks its result against numpy, saves a checkpoint into /tmp (each host's own: rank 0 writes
the manifest on the first) and loads it into a session that holds w1 whole on every rank (the second host's
blocks cross over MPI)."""

import socket
import sys
from pathlib import Path

import numpy as np

import slicer


def main():
    text = Path(sys.argv[1]).read_text()
    rng = np.random.default_rng(3)
    x, w1, b1, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((8, 16), (16, 32), (32,), (32, 16)))
    split = slicer.compile(text, mesh=slicer.Mesh(x=2, y=2), tactics=[slicer.Tile(arg=1, dim=1, axes="x")])
    directory = Path("/tmp/slicer-multihost-checkpoint")
    with split.session(state={1: w1, 2: b1, 3: w2}) as s:
        np.testing.assert_allclose(s.step(x), np.maximum(x @ w1 + b1, 0) @ w2, rtol=1e-4, atol=1e-5)
        s.save(directory)
    whole = slicer.compile(text, mesh=slicer.Mesh(x=2, y=2), tactics=[slicer.Tile(arg=0, dim=0, axes="x")])
    with whole.session(state={1: np.zeros_like(w1), 2: np.zeros_like(b1), 3: np.zeros_like(w2)}) as s:
        s.load(directory)
        for got, want in zip(s.state_dict().values(), (w1, b1, w2), strict=True):
            np.testing.assert_array_equal(got, want)
    print(f"in-job ok on {socket.gethostname()}", flush=True)


main()
