"""Measuring the time model's figures with the MPI executor (``slicer-plan --calibrate``).

Run under ``mpiexec -n R python -m slicer.runtime.collectives.calibration [--mesh x=2,y=4]``: on a 1-D mesh of
all ranks (the default figures) and, with ``--mesh``, along each axis of that mesh on its own (figures per
axis), it times the two kinds of step plans are made of -- an all-to-all over the axis and a permute that
moves every block one step along it -- for blocks from a few bytes to several MiB, each the median over
repetitions of the slowest rank (a barrier before and after). It then fits ``time = latency + busiest
bytes / bandwidth`` to all of them (least squares on the relative error, so that small and large sizes
count alike) and rank 0 prints the figures as one JSON line. `slicer-plan --calibrate` starts it and
stores the result where `costs.CostModel.default` finds it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

from slicer.core.mesh import Mesh
from slicer.redistribution.costs import CostModel
from slicer.redistribution.steps import AllToAll, Permute
from slicer.redistribution.types import DistType

from .plan_executor import MeshExecutor

SIZES = tuple(1 << s for s in range(3, 23, 2))  # block bytes per device: 8 B .. 4 MiB


def _steps(mesh: Mesh, axis: str, elements: int):
    """(label, step, type before, block shape, busiest bytes) for an all-to-all and a permute over ``axis``
    on blocks of about ``elements`` f32 (the all-to-all sends contiguous rows, as the executor's best case)."""
    k = mesh.size(axis)
    columns = max(1, elements // k)
    shape = (k, k * columns)
    before = DistType.of(mesh, shape, [[], [axis]])
    after = DistType.of(mesh, shape, [[axis], []])
    a2a = AllToAll(0, 1, (axis,), after)
    index = mesh.axis_index(axis)
    pairs = []
    for r in range(mesh.device_count):
        c = list(mesh.coords(r))
        c[index] = (c[index] + 1) % k
        pairs.append((r, mesh.rank(c)))
    local = before.local_shape(mesh)
    n = int(np.prod(local))
    return [(AllToAll.op, a2a, before, local, AllToAll.busiest(k, n) * 4),
            (Permute.op, Permute(tuple(pairs), before), before, local, Permute.busiest(k, n) * 4)]


def measure(comm, mesh: Mesh, axes: tuple[str, ...], reps: int = 7, sizes=SIZES) -> list[dict]:
    """Timings (seconds, slowest rank, median of ``reps``) of an all-to-all and a permute over each of
    ``axes`` for each block size in ``sizes``."""
    executor = MeshExecutor(mesh, comm)
    rank = comm.Get_rank()
    out = []
    try:
        for axis in axes:
            for size in sizes:
                for label, step, before, local, busiest in _steps(mesh, axis, max(1, size // 4)):
                    block = np.full(local, rank, dtype=np.float32)
                    executor.step(step, before, block)  # warm up: communicators, datatypes
                    times = []
                    for _ in range(reps):
                        comm.Barrier()
                        start = time.perf_counter()
                        executor.step(step, before, block)
                        comm.Barrier()
                        times.append(comm.allreduce(time.perf_counter() - start, op=_max()))
                    out.append({"axis": axis, "op": label, "busiest_bytes": busiest,
                                "seconds": statistics.median(times)})
    finally:
        executor.close()
    return out


def _max():
    from mpi4py import MPI  # optional dependency: only MPI runs need it
    return MPI.MAX


def fit(samples: list[dict]) -> tuple[float, float]:
    """(latency seconds, bandwidth bytes/s) of ``time = latency + bytes / bandwidth`` fitted to ``samples``
    (least squares on relative errors; both figures kept positive)."""
    x = np.array([s["busiest_bytes"] for s in samples], dtype=np.float64)
    t = np.array([s["seconds"] for s in samples], dtype=np.float64)
    w = 1.0 / np.maximum(t, 1e-9)
    a = np.stack([w, x * w], axis=1)
    (latency, inverse), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    if inverse <= 0:  # no size large enough to see the bandwidth: use the largest transfer alone
        big = int(np.argmax(x))
        inverse = max(t[big] - max(latency, 0.0), 1e-12) / max(x[big], 1.0)
    return max(float(latency), 1e-7), float(1.0 / inverse)


def model_from(samples: list[dict], default_axis: str, source: str) -> CostModel:
    """The cost model of ``samples``: default figures from those over ``default_axis``, figures of their own
    for the other axes measured."""
    mine = [s for s in samples if s["axis"] == default_axis]
    latency, bandwidth = fit(mine)
    per_axis = {a: fit([s for s in samples if s["axis"] == a]) for a in {s["axis"] for s in samples} - {default_axis}}
    return CostModel(latency=latency, bandwidth=bandwidth,
                     axis_latency=tuple(sorted((a, f[0]) for a, f in per_axis.items())),
                     axis_bandwidth=tuple(sorted((a, f[1]) for a, f in per_axis.items())), source=source)


def main(argv=None) -> int:
    from mpi4py import MPI  # optional dependency: only MPI runs need it

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mesh", default="", help="also measure each axis of this mesh (e.g. x=2,y=4)")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--max-bytes", type=int, default=SIZES[-1])
    args = parser.parse_args(argv)
    comm = MPI.COMM_WORLD
    sizes = tuple(s for s in SIZES if s <= args.max_bytes) or SIZES[:1]
    line = Mesh([("ranks", comm.Get_size())])
    samples = measure(comm, line, ("ranks",), args.reps, sizes)
    if args.mesh:
        mesh = Mesh.parse(args.mesh)
        samples += measure(comm, mesh, tuple(a for a in mesh.axis_names if mesh.size(a) > 1), args.reps, sizes)
    if comm.Get_rank() == 0:
        print(json.dumps({"ranks": comm.Get_size(), "samples": samples}))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
