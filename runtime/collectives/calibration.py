"""Measuring the time model's figures with the MPI executor (``slicer-plan --calibrate``).

Run under ``mpiexec -n R python -m slicer.runtime.collectives.calibration [--mesh x=2,y=4]``: on a 1-D mesh of
all ranks (the default figures) and, with ``--mesh``, along each axis of that mesh on its own (figures per
axis), it times the two kinds of step plans are made of -- an all-to-all over the axis and a permute that
moves every block one step along it -- for blocks from a few bytes to several MiB, each the median over
repetitions of the slowest rank (a barrier before and after). It then fits ``time = latency + busiest
bytes / bandwidth`` to all of them (least squares on the relative error, so that small and large sizes
count alike) and rank 0 prints the figures as one JSON line. A job on several hosts with as many ranks on each
also measures its links per class (`costs.HOST`, `costs.NETWORK`: `links_mesh`), which `CostModel.for_mesh`
gives to any mesh's axes by where their groups lie. `slicer-plan --calibrate` starts it and
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
from slicer.redistribution.costs import HOST, NETWORK, CostModel
from slicer.redistribution.steps import AllToAll, Permute
from slicer.redistribution.types import DistType

from .plan_executor import MeshExecutor

SIZES = tuple(1 << s for s in range(3, 23, 2))  # block bytes per device: 8 B .. 4 MiB
LINK_AXES = {NETWORK: "hosts_", HOST: "host_"}  # the axes of `links_mesh`
LINK_OF = {axis: link for link, axis in LINK_AXES.items()}


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


def _mpi():
    from mpi4py import MPI  # optional dependency: only MPI runs need it
    return MPI


def _max():
    return _mpi().MAX


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


def model_from(samples: list[dict], default_axis: str, source: str, ranks_per_host: int = 0) -> CostModel:
    """The cost model of ``samples``: default figures from those over ``default_axis``, figures of their own
    for the other axes measured, and per link class for the samples of `links_mesh`'s axes (a job of
    `ranks_per_host` ranks on each host)."""
    latency, bandwidth = fit([s for s in samples if s["axis"] == default_axis])
    axes = {s["axis"] for s in samples if "link" not in s} - {default_axis}
    per_axis = {a: fit([s for s in samples if s["axis"] == a and "link" not in s]) for a in axes}
    links: set[str] = {s["link"] for s in samples if "link" in s}
    per_link = {k: fit([s for s in samples if s.get("link") == k]) for k in links}
    return CostModel(latency=latency, bandwidth=bandwidth,
                     axis_latency=tuple(sorted((a, f[0]) for a, f in per_axis.items())),
                     axis_bandwidth=tuple(sorted((a, f[1]) for a, f in per_axis.items())), source=source,
                     link_latency=tuple(sorted((k, f[0]) for k, f in per_link.items())),
                     link_bandwidth=tuple(sorted((k, f[1]) for k, f in per_link.items())),
                     ranks_per_host=ranks_per_host if per_link else 0)


def links_mesh(comm) -> tuple[Mesh | None, int]:
    """(a mesh whose major axis `_hosts` crosses the hosts and whose minor axis `_host` stays within each, the
    ranks per host) for a job on several hosts with as many ranks on each, numbered host by host (the mesh
    None otherwise, or when there is one host); collective."""
    MPI = _mpi()
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    first, size = local.allreduce(comm.Get_rank(), op=MPI.MIN), local.Get_size()
    local.Free()
    firsts, sizes = comm.allgather(first), comm.allgather(size)
    per_host = sizes[0]
    hosts = comm.Get_size() // per_host
    if hosts < 2 or any(s != per_host for s in sizes) or any(f != r - r % per_host for r, f in enumerate(firsts)):
        return None, 0
    return Mesh([(LINK_AXES[NETWORK], hosts)] + ([(LINK_AXES[HOST], per_host)] if per_host > 1 else [])), per_host


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
    links, per_host = links_mesh(comm)
    if links is not None:  # the links between the hosts and within them, whatever the mesh
        found = measure(comm, links, links.axis_names, args.reps, sizes)
        samples += [dict(s, link=LINK_OF[s["axis"]]) for s in found]
    if comm.Get_rank() == 0:
        print(json.dumps({"ranks": comm.Get_size(), "ranks_per_host": per_host, "samples": samples}))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
