"""Run under mpiexec by test_api_mpi.py: code already in an MPI job partitions and runs a program."""

import sys

import numpy as np

import slicer
from slicer.lowering import compile_function
from slicer.runtime.jobs.rank import run_rank


def main(comm):
    text = open(sys.argv[1]).read()
    prog = slicer.compile(text, mesh=slicer.Mesh(x=2, y=2),
                          tactics=[slicer.Tile(arg=0, dim=0, axes="x"), slicer.Tile(arg=1, dim=1, axes="y"),
                                   slicer.Tile(arg=3, dim=0, axes="y")])
    rng = np.random.default_rng(4)  # every rank makes the same global arrays; each uses its blocks
    inputs = [rng.standard_normal(s).astype(np.float32) for s in [(8, 16), (16, 32), (32,), (32, 16)]]
    out = prog.run_in_mpi(*inputs, comm=comm)
    if comm.Get_rank() == 0:
        expected = compile_function(text)(*inputs)
        print("max error", float(np.max(np.abs(out - expected))))
    else:
        assert out is None


run_rank(main)
