"""Runs under mpiexec: executes every benchmark-suite plan (ours and the naive one) with the MPI executor and
compares each rank's result with the whole-mesh simulator. Rank 0 prints one JSON line with the results."""

import argparse
import json
import sys

import numpy as np
from mpi4py import MPI

from slicer.redistribution import initial_blocks, plan, simulate_blocks
from slicer.redistribution.mpi_exec import MeshExecutor
from slicer.redistribution.simulation import mismatches
from slicer.redistribution.suite import cases
from slicer.redistribution.synthesis import naive_plan
from slicer.redistribution.types import numpy_dtype


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bytes", type=int, default=1 << 14)
    ap.add_argument("--dtypes", default="f32,f64,i32,f16")
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    results = []
    executors = {}
    for dtype in args.dtypes.split(","):
        for case in cases(comm.Get_size(), args.bytes, dtype):
            executor = executors.get(case.mesh) or executors.setdefault(case.mesh, MeshExecutor(case.mesh, comm))
            size = int(np.prod(case.shape))
            data = ((np.arange(size) * 7) % 61 - 30).astype(numpy_dtype(dtype)).reshape(case.shape)
            start = initial_blocks(case.mesh, case.src, data, seed=3)
            for kind, p in (("ours", plan(case.mesh, case.src, case.dst, dtype=dtype)),
                            ("naive", naive_plan(case.mesh, case.src, case.dst, dtype=dtype))):
                expected = simulate_blocks(p, start)
                got = executor.run(p, start[rank].copy())
                same = got.shape == expected[rank].shape and np.array_equal(got, expected[rank])
                everyone = comm.gather(got, root=0)  # test harness only: check the final layout globally
                correct = True
                if rank == 0:
                    correct = not mismatches(case.mesh, case.dst, data, everyone)
                ok = comm.allreduce(int(same), op=MPI.MIN) == 1
                correct = comm.bcast(correct, root=0)
                results.append({"case": case.name, "dtype": dtype, "plan": kind, "steps": [s.op for s in p.steps],
                                "matches_simulator": ok, "correct": correct})
    for ex in executors.values():
        ex.close()
    if rank == 0:
        print(json.dumps({"ranks": comm.Get_size(), "results": results}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
