"""Runs under mpiexec: every collective step kind, on random layouts whose chunks are not contiguous (gather,
split and scatter dims behind other dims, several axes per group, reordering all-to-alls, odd local sizes, sizes
of 1), several dtypes (bf16 among them: its sums in f32, rounded once),
executed by the MPI executor blocking, nonblocking (all steps of a mesh in flight at once, completed in reverse
order) and as programs run twice (reused buffers), each rank's result compared bit for bit with the whole-mesh
simulator's. Rank 0 prints one JSON line: the cases and the failures."""

import argparse
import hashlib
import json
import sys

import ml_dtypes
import numpy as np
from mpi4py import MPI

from slicer.redistribution import AllGather, AllReduce, AllSlice, AllToAll, DistType, Mesh, Permute, ReduceScatter
from slicer.redistribution.layout import Layout
from slicer.redistribution.numpy_semantics import run_step
from slicer.redistribution.steps import apply_rule, step_with_type
from slicer.runtime.collectives.plan_executor import MeshExecutor

KINDS = ("all_gather", "all_to_all", "all_slice", "all_reduce", "reduce_scatter", "permute")
BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = (np.float32, np.float64, np.int32, np.float16, BF16, np.int8, np.bool_)
ODD = (1, 3, 5, 7)


def meshes(ranks: int) -> list[Mesh]:
    return {2: [Mesh(x=2)], 4: [Mesh(x=2, y=2), Mesh(x=4)], 8: [Mesh(x=2, y=2, z=2), Mesh(x=2, y=4)]}[ranks]


def random_case(rng, mesh: Mesh, kind: str):
    """(before type, step) of `kind` on `mesh`: random rank 1-3, random odd local sizes, a random group of
    axes and random other axes on other dims, so that chunks are rarely contiguous."""
    names = list(mesh.axis_names)
    rank = int(rng.integers(1 if kind in ("all_gather", "all_slice", "all_reduce", "reduce_scatter", "permute") else 2,
                            4))
    order = [str(a) for a in rng.permutation(names)]
    group = tuple(str(a) for a in order[:int(rng.integers(1, len(order) + 1))])
    rest = order[len(group):]
    k = mesh.group_size(group)
    dims = [[] for _ in range(rank)]
    partial: tuple = ()
    local = [int(rng.choice(ODD)) for _ in range(rank)]
    d = int(rng.integers(rank))
    if kind in ("all_gather", "all_to_all"):
        dims[d] = list(group)
    if kind in ("all_reduce", "reduce_scatter"):
        partial = tuple(a for a in names if a in group)
    if kind == "all_to_all":
        e = int(rng.choice([i for i in range(rank) if i != d]))
        local[e] *= k
    if kind in ("all_slice", "reduce_scatter"):
        local[d] *= k
    if kind == "permute":  # swap two equal axes between or within dims
        pairs = [(a, b) for a in names for b in names if a < b and mesh.size(a) == mesh.size(b)]
        if not pairs:
            return None
        a, b = pairs[int(rng.integers(len(pairs)))]
        d2 = int(rng.integers(rank))
        dims[d] = [a] if d != d2 else [a, b]
        if d != d2:
            dims[d2] = [b]
        rest = [r for r in rest if r not in (a, b)]
    for axis in rest:  # the other axes tile other dims (major to the group) or replicate
        where = int(rng.integers(rank + 1))
        if where < rank and kind != "permute":
            dims[where].insert(0, axis)
    shape = tuple(n * mesh.group_size(ax) for n, ax in zip(local, dims))
    before = DistType.of(mesh, shape, [tuple(x) for x in dims], partial)
    if kind == "all_gather":
        step = AllGather(d, group, before)
    elif kind == "all_to_all":
        # half of them reordering (the split dim gains the group's axes in another order), when it can
        reorder = tuple(str(a) for a in rng.permutation(group)) if len(group) > 1 and rng.integers(2) else None
        step = AllToAll(e, d, group, before, reorder if reorder != group else None)
    elif kind == "all_slice":
        step = AllSlice(d, group, before)
    elif kind == "all_reduce":
        step = AllReduce(group, before)
    elif kind == "reduce_scatter":
        step = ReduceScatter(d, group, before)
    else:
        after_dims = [tuple(b if x == a else a if x == b else x for x in dd) for dd in before.dims]
        after = DistType.of(mesh, shape, after_dims, partial)
        ia, ib = mesh.axis_index(a), mesh.axis_index(b)  # device r holds what r with a, b swapped held

        def swapped(r):
            c = list(mesh.coords(r))
            c[ia], c[ib] = c[ib], c[ia]
            return mesh.rank(c)

        source = np.array([swapped(r) for r in range(mesh.device_count)])
        moved = np.nonzero(source != np.arange(mesh.device_count))[0]
        step = Permute.between(source[moved], moved, after)
    return before, step_with_type(step, apply_rule(step, before, mesh))


def device_blocks(rng, mesh: Mesh, before: DistType, dtype) -> list[np.ndarray]:
    shape = before.local_shape(mesh)
    if dtype == np.bool_:
        return [rng.integers(0, 2, size=shape).astype(bool) for _ in range(mesh.device_count)]
    return [rng.integers(-20, 20, size=shape).astype(dtype) for _ in range(mesh.device_count)]


def large_cases(mesh: Mesh):
    """Blocks over 64 KiB (all_reduce in two phases over shared memory, chunks of unequal size), float data
    that is not integer-valued (sums depend on their order), non-leading dims."""
    group = tuple(mesh.axis_names)
    k = mesh.group_size(group)
    out = []
    for dtype, shape in ((np.float32, (129, 131)), (np.float16, (257, 131)), (BF16, (257, 131)),
                         (np.float64, (67, 129))):
        before = DistType.of(mesh, shape, ((), ()), group)
        out.append((before, AllReduce(group, before), dtype))
    before = DistType.of(mesh, (96, 80 * k), ((), ()), group)  # bf16 summed in f32 (over MPI: on an f32 wire)
    out.append((before, ReduceScatter(1, group, before), BF16))
    for dtype in (np.float32, np.float64):
        shape = (96, 80 * k)
        before = DistType.of(mesh, shape, ((), ()), group)
        out.append((before, ReduceScatter(1, group, before), dtype))
        before = DistType.of(mesh, (96, 64 * k), ((), group), ())
        out.append((before, AllGather(1, group, before), dtype))
        before = DistType.of(mesh, (24, 40 * k, 16 * k), ((), group, ()), ())
        out.append((before, AllToAll(2, 1, group, before), dtype))
        if len(group) > 1:  # reordering: chunks go to the members in the reversed axis order
            out.append((before, AllToAll(2, 1, group, before, group[::-1]), dtype))
    return [(b, step_with_type(st, apply_rule(st, b, mesh)), d) for b, st, d in out]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=6, help="random cases per kind, mesh and dtype")
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    rng = np.random.default_rng(1234)  # the same cases on every rank
    failures, count, kinds_seen = [], 0, set()
    for mesh in meshes(comm.Get_size()):
        ex = MeshExecutor(mesh, comm)
        in_flight = []
        for dtype in DTYPES:
            for kind in KINDS:
                for _ in range(args.cases):
                    case = random_case(rng, mesh, kind)
                    if case is None:
                        continue
                    before, step = case
                    blocks = device_blocks(rng, mesh, before, dtype)
                    expected = run_step(Layout(mesh, before.shape), step, blocks)[rank]
                    name = f"{mesh} {np.dtype(dtype).name} {step.op} {before} -> {step.type_after} {step.fields()}"
                    mine = blocks[rank].copy()
                    got = {"blocking": ex.step(step, before, mine)}
                    program = ex.program(step, mine.shape, mine.dtype)
                    program.owned_out = program.new_out()
                    first, _ = program.run(mine, program.owned_out)
                    first = first.copy()
                    got["program, second run"] = program.run(mine, program.owned_out)[0]
                    got["program, first run"] = first
                    in_flight.append((name, expected, ex.start(step, before, mine), mine))
                    for how, array in got.items():
                        if array.shape != expected.shape or array.dtype != expected.dtype \
                                or not np.array_equal(array, expected):
                            failures.append(f"{how}: {name}")
                    count += 1
                    kinds_seen.add(step.op)
        for before, step, dtype in large_cases(mesh):
            blocks = [rng.standard_normal(before.local_shape(mesh)).astype(dtype) for _ in range(mesh.device_count)]
            expected = run_step(Layout(mesh, before.shape), step, blocks)[rank]
            program = ex.program(step, blocks[rank].shape, blocks[rank].dtype)
            got, _ = program.run(blocks[rank])
            again, _ = program.run(blocks[rank])
            name = f"large {mesh} {np.dtype(dtype).name} {step.op} {before} -> {step.type_after}"
            exact = program.shm is not None or not isinstance(step, (AllReduce, ReduceScatter))
            tolerance = 1e-2 if np.dtype(dtype) in (np.float16, BF16) else 1e-5
            close = np.allclose(got.astype(np.float64), expected.astype(np.float64), rtol=tolerance, atol=tolerance)
            if not (np.array_equal(got, expected) if exact else close):
                failures.append(f"{'bits' if exact else 'values'}: {name}")
            if not np.array_equal(got, again):
                failures.append(f"second run differs: {name}")
            if isinstance(step, AllReduce):  # every rank holds the same bits
                digests = comm.allgather(hashlib.sha256(got.tobytes()).hexdigest())
                if len(set(digests)) != 1:
                    failures.append(f"replicas differ: {name}")
            count += 1
        for name, expected, pending, _mine in reversed(in_flight):  # all in flight; completed in reverse order
            array = pending.wait()
            if not np.array_equal(array, expected):
                failures.append(f"nonblocking: {name}")
        ex.close()
    failures = sorted(set(sum(comm.allgather(failures), [])))
    if rank == 0:
        print(json.dumps({"ranks": comm.Get_size(), "cases": count, "kinds": sorted(kinds_seen),
                          "failures": failures}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
