"""Runs under mpiexec: executes every benchmark-suite plan (ours and the naive one) with the MPI executor and
compares each rank's result with the whole-mesh simulator; then (``--random N``) N random reshards whose
types may use sub-axes, planned for both objectives. Rank 0 prints one JSON line with the results."""

import argparse
import json
import random
import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

from slicer.redistribution import DistType, Mesh, RedistributionError, initial_blocks, plan, simulate_blocks
from slicer.redistribution.costs import CostModel
from slicer.redistribution.numpy_semantics import mismatches
from slicer.redistribution.synthesis import naive_plan
from slicer.redistribution.types import numpy_dtype
from slicer.runtime.collectives.plan_executor import MeshExecutor

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # the reshard suite
from reshard_suite import cases

MESHES = {4: [(4,), (2, 2)], 8: [(8,), (2, 4), (4, 2), (2, 2, 2)]}


def random_case(rng: random.Random, devices: int):
    """A random mesh of ``devices`` devices, and source/target types over its axes and their halves
    (``x:(1)2``, ``x:(2)k``), the source possibly with partial sums: (mesh, src, dst)."""
    shape_of_mesh = rng.choice(MESHES[devices])
    mesh = Mesh([(n, k) for n, k in zip("xyz", shape_of_mesh)])
    rank = rng.randint(1, 3)

    def tokens():
        out = []
        for name, k in mesh.axes:
            if k >= 4 and rng.random() < 0.5:
                out += [f"{name}:(1)2", f"{name}:(2){k // 2}"]
            else:
                out.append(name)
        rng.shuffle(out)
        return out

    def placement(partial_ok: bool):
        dims, partial = [[] for _ in range(rank)], []
        for t in tokens():
            where = rng.randint(-2 if partial_ok else -1, rank - 1)
            if where >= 0:
                dims[where].append(t)
            elif where == -2:
                partial.append(t)
        return dims, partial

    sd, sp = placement(True)
    dd, _ = placement(False)
    shape = [devices * rng.choice([2, 4]) for _ in range(rank)]
    src = DistType.of(mesh, shape, sd, sp)
    dst_partial = [a for a in sp if all(a not in d for d in dd) and rng.random() < 0.5]
    try:
        dst = DistType.of(mesh, shape, dd, dst_partial)
    except RedistributionError:  # a kept partial part overlapping a tiled one: keep no partial sums
        dst = DistType.of(mesh, shape, dd, [])
    return mesh, src, dst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bytes", type=int, default=1 << 14)
    ap.add_argument("--dtypes", default="f32,f64,i32,f16")
    ap.add_argument("--random", type=int, default=0, help="random reshards with sub-axes, both objectives")
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
    rng = random.Random(7)
    for i in range(args.random):
        mesh, src, dst = random_case(rng, comm.Get_size())
        executor = executors.get(mesh) or executors.setdefault(mesh, MeshExecutor(mesh, comm))
        size = int(np.prod(src.shape))
        data = ((np.arange(size) * 5) % 37 - 18).astype(np.float32).reshape(src.shape)
        start = initial_blocks(mesh, src, data, seed=i)
        for cost in (CostModel(), CostModel.bytes()):
            p = plan(mesh, src, dst, cost=cost)
            expected = simulate_blocks(p, start)
            got = executor.run(p, start[rank].copy())
            same = comm.allreduce(int(np.array_equal(got, expected[rank])), op=MPI.MIN) == 1
            everyone = comm.gather(got, root=0)
            correct = comm.bcast(not mismatches(mesh, dst, data, everyone) if rank == 0 else None, root=0)
            results.append({"case": f"random {mesh} {src} -> {dst}", "dtype": "f32", "plan": cost.objective,
                            "steps": [s.op for s in p.steps], "matches_simulator": same, "correct": correct,
                            "sub_axes": any(t.has_sub_axes() for t in p.trace.types)})
    for ex in executors.values():
        ex.close()
    if rank == 0:
        print(json.dumps({"ranks": comm.Get_size(), "results": results}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
