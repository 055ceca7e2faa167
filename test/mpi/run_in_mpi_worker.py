"""Run under mpiexec by test_api_mpi.py: code already in an MPI job partitions and runs a program, with how
collectives run as arguments (the environment's defaults, set here to values that mean nothing, never read);
a bad argument is an OptionError on every rank, before anything runs."""

import os
import sys

import numpy as np

import slicer
from slicer.core.errors import OptionError
from slicer.lowering import compile_function
from slicer.runtime.jobs.rank import run_rank


def main(comm):
    text = open(sys.argv[1]).read()
    prog = slicer.compile(text, mesh=slicer.Mesh(x=2, y=2),
                          tactics=[slicer.Tile(arg=0, dim=0, axes="x"), slicer.Tile(arg=1, dim=1, axes="y"),
                                   slicer.Tile(arg=3, dim=0, axes="y")])
    rng = np.random.default_rng(4)  # every rank makes the same global arrays; each uses its blocks
    inputs = [rng.standard_normal(s).astype(np.float32) for s in [(8, 16), (16, 32), (32,), (32, 16)]]
    os.environ["SLICER_COLLECTIVES"] = "nccl"  # read only when no argument is given: each would be an OptionError
    os.environ["SLICER_OVERLAP"] = "sometimes"
    refusal = None
    try:
        prog.run_in_mpi(*inputs, comm=comm, collectives="shm", overlap=None)
    except OptionError as exc:
        refusal = str(exc)
    # Rank 0 prints every rank's outcome: lines printed by 4 ranks at once can interleave in mpiexec's output.
    refusals = comm.gather(refusal, root=0)
    if comm.Get_rank() == 0:
        for rank, refused in enumerate(refusals):
            print(f"rank {rank} refused: {refused}")
    # Rank 0's choice holds on every rank (ranks running collectives differently would wait for each other).
    out = prog.run_in_mpi(*inputs, comm=comm, collectives="mpi" if comm.Get_rank() == 0 else "shm", overlap=False)
    if comm.Get_rank() == 0:
        expected = compile_function(text)(*inputs)
        print("max error", float(np.max(np.abs(out - expected))))
    else:
        assert out is None


run_rank(main)
