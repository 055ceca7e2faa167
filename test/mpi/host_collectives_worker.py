"""Runs under `mpiexec -n 4`: the all_reduce and all_gather in two levels (`runtime.host_collectives`), their hosts
simulated on one machine (`MeshExecutor(hosts=...)`: ranks 0,1 | 2,3, then 0,2 | 1,3), or with `--real-hosts` the
hosts MPI finds (test_multihost.py's two), against the flat MPI collective (strategy "mpi") and the simulator, on
mesh x=2,y=2 over both axes (and x alone: one member per host, flat). Exact data (small integers in floats,
integers, bools, maxima, any gather) must equal both bit for bit; random float sums equal them to rounding (their
order differs: host by host). Every rank of a group gets the same bits, and a program run back to back (its shared
memory reused) stays right. Rank 0 prints one JSON line: the cases, the failures, which groups ran in two levels."""

import json
import sys

import ml_dtypes
import numpy as np
from mpi4py import MPI

from slicer.redistribution import DistType, Mesh
from slicer.redistribution.layout import Layout
from slicer.redistribution.numpy_semantics import run_step
from slicer.redistribution.steps import AllGather, AllReduce, apply_rule, step_with_type
from slicer.redistribution.subaxes import group_size
from slicer.runtime.collectives.plan_executor import MeshExecutor

EXACT_DTYPES = (np.float32, ml_dtypes.bfloat16, np.int32)


def blocks_for(rng, dtype, shape, exact: bool, count: int) -> list[np.ndarray]:
    if np.dtype(dtype) == np.bool_:
        return [rng.random(shape) < 0.3 for _ in range(count)]
    if exact:
        return [rng.integers(-8, 9, shape).astype(dtype) for _ in range(count)]
    return [rng.standard_normal(shape).astype(dtype) for _ in range(count)]


def run(program, block: np.ndarray) -> np.ndarray:
    """The executor's way: started, advanced while waiting, then completed."""
    pending = program.start(block)
    for _ in range(3):
        pending.test()
    return pending.wait()


def gather_cases(ex, flat, rng, failures: list, levels: dict, hosts) -> int:
    """all_gather over both axes (each member's block in its place) and over x alone, bit for bit."""
    mesh, rank, count = ex.mesh, ex.rank, 0
    for axes in (("x", "y"), ("x",)):
        for dtype, shape, dim in ((np.float32, (3, 5), 0), (np.float32, (40, 33), 1), (ml_dtypes.bfloat16, (6, 4), 1)):
            global_shape = tuple(n * (group_size(mesh, axes) if i == dim else 1) for i, n in enumerate(shape))
            before = DistType.of(mesh, global_shape, tuple(axes if i == dim else () for i in range(len(shape))))
            step = AllGather(dim, axes, before)
            step = step_with_type(step, apply_rule(step, before, mesh))
            local = tuple(before.local_shape(mesh))
            program = ex.program(step, local, dtype)
            levels[f"{hosts} {axes} all_gather"] = program.hier is not None
            for repeat in range(2):
                blocks = [rng.standard_normal(local).astype(dtype) for _ in range(mesh.device_count)]
                want = run_step(Layout.get(mesh, global_shape), step, blocks)[rank]
                got = run(program, blocks[rank])
                count += 1
                if not (got.shape == want.shape and np.array_equal(got, want)
                        and np.array_equal(got, flat.step(step, before, blocks[rank]))):
                    failures.append(f"hosts {hosts} {axes} all_gather {np.dtype(dtype).name}{list(shape)} #{repeat}")
    return count


def main():
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    mesh = Mesh(x=2, y=2)
    rng = np.random.default_rng(5)  # the same blocks on every rank
    flat = MeshExecutor(mesh, comm, strategy="mpi")
    cases, failures, levels = 0, [], {}
    simulated = ((0, 0, 1, 1), (0, 1, 0, 1))
    for hosts in simulated if sys.argv[1:] != ["--real-hosts"] else (None,):
        ex = MeshExecutor(mesh, comm, strategy="auto", hosts=hosts)
        for axes in (("x", "y"), ("y", "x"), ("x",)):  # x alone: one member per host, flat
            cases_here = [(dtype, True, "sum") for dtype in EXACT_DTYPES] + [
                (np.float32, False, "sum"), (np.float32, False, "max"), (np.bool_, True, "sum")]
            for dtype, exact, reduction in cases_here:
                for shape in ((3, 5), (300, 129)):  # uneven chunks; two-phase size
                    before = DistType.of(mesh, shape, tuple(() for _ in shape), axes)
                    step = AllReduce(axes, before, reduction)
                    step = step_with_type(step, apply_rule(step, before, mesh))
                    program = ex.program(step, shape, dtype)
                    levels[f"{hosts} {axes}"] = program.hier is not None
                    for repeat in range(2):
                        blocks = blocks_for(rng, dtype, shape, exact, mesh.device_count)
                        want = run_step(Layout.get(mesh, shape), step, blocks)[rank]
                        reference = flat.step(step, before, blocks[rank])
                        got = run(program, blocks[rank])
                        every = comm.allgather(got)
                        cases += 1
                        name = f"hosts {hosts} {axes} {np.dtype(dtype).name}{list(shape)} {reduction} #{repeat}"
                        if got.dtype != want.dtype or got.shape != want.shape:
                            failures.append(f"{name}: {got.dtype}{got.shape}, want {want.dtype}{want.shape}")
                        elif len(axes) == 2 and any(e.tobytes() != got.tobytes() for e in every):
                            failures.append(f"{name}: the ranks disagree")
                        elif exact and not (np.array_equal(got, want) and np.array_equal(got, reference)):
                            failures.append(f"{name}: not bit for bit")
                        elif not exact and not (np.allclose(got, want, rtol=1e-6, atol=1e-6)
                                                and np.allclose(got, reference, rtol=1e-6, atol=1e-6)):
                            failures.append(f"{name}: off by {np.abs(got - want).max()}")
        cases += gather_cases(ex, flat, rng, failures, levels, hosts)
        ex.close()
    flat.close()
    every = comm.gather(failures, root=0)
    if rank == 0:
        print(json.dumps({"cases": cases, "failures": [f for fs in every for f in fs][:20], "levels": levels}))


if __name__ == "__main__":
    main()
