"""Run under mpiexec by test_runtime_faults.py: one rank fails while the others wait in a collective."""

import sys

import numpy as np

from slicer.core.errors import InputError
from slicer.runtime.jobs.rank import at_step, run_rank


def main(comm):
    rank = comm.Get_rank()
    mode = sys.argv[1]
    at_step(rank, "start")
    if mode == "raise" and rank == 1:
        raise ValueError("input block of rank 1 is wrong")
    if mode == "slicer-error" and rank == 1:
        raise InputError("input block of rank 1 is wrong")
    # Everybody else waits in a collective the failed rank never joins.
    total = np.zeros(1)
    comm.Allreduce(np.ones(1), total)
    print(f"rank {rank} done {total[0]}")


run_rank(main)
