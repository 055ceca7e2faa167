"""Slicer's redistribution plans vs XLA's, side by side, on 8 devices (issue 16).

For each reshard of the suite below (1-D, 2-D and 3-D meshes of 8 devices; the two cases of the issue
among them), XLA compiles it with JAX on 8 CPU devices (`xla_hlo`: its collectives read from the
compiled HLO, its peak from its buffer assignment, its time from running it), and Slicer plans it
(`slicer.redistribution.plan`, default cost model) and runs the plan with its MPI executor on 8 ranks
(``mpiexec``, this file's ``--worker`` mode: median over repetitions of the slowest rank, a barrier
before each). Reported per case: bytes received by the busiest device and by all devices, peak live bytes
per device, time, and the steps of both. Peak: XLA's is argument + output + temporaries (the argument is
not donated); Slicer's is counted the same way -- the source block stays live with the caller while the
plan runs, plus each step's input and output block. JAX is optional (``pip install -e '.[bench]'``); without
it the benchmark says so and exits 0.

    python benchmarks/redistribution_vs_xla.py [--reps 9] [--json out.json] [--no-time]

Times compare unlike runtimes on this 2-core machine: XLA moves data between 8 threads of one process,
Slicer between 8 MPI processes on 2 cores, told to yield while they wait (``MPIR_CVAR_ENABLE_HEAVY_YIELD``;
``--spin`` keeps MPICH's spinning default), so the time ratio says more about the runtimes than about the
plans; bytes and peaks are the plans' own.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from slicer.core.host import host_cores
from slicer.redistribution import AllSlice, DistType, Mesh, plan
from slicer.redistribution.layout import Layout
from slicer.redistribution.numpy_semantics import block_slices
from slicer.runtime.jobs.mpiexec import run_spmd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import xla_hlo  # noqa: E402 - beside this file

M1 = "w=8"
M24, M42, M222 = "x=2,y=4", "x=4,y=2", "x=2,y=2,z=2"
S2, S3, S3B = (1024, 1024), (128, 128, 64), (64, 64, 64)
CASES = [
    # 1-D
    ("1d_transpose", M1, S2, "[[w],[]]", "[[],[w]]"),
    ("1d_gather", M1, S2, "[[w],[]]", "[[],[]]"),
    ("1d_slice", M1, S2, "[[],[]]", "[[w],[]]"),
    ("1d_transpose_back", M1, S2, "[[],[w]]", "[[w],[]]"),
    ("1d_3d_move", M1, S3, "[[w],[],[]]", "[[],[],[w]]"),
    ("1d_3d_gather_last", M1, S3, "[[],[],[w]]", "[[],[],[]]"),
    # 2-D x=2,y=4
    ("swap_axes_2x4 (issue)", M24, S2, "[[x],[y]]", "[[y],[x]]"),
    ("dim_move_2x4", M24, S2, "[[x,y],[]]", "[[],[x,y]]"),
    ("swap_within_dim_2x4", M24, S2, "[[x,y],[]]", "[[y,x],[]]"),
    ("move_and_swap_2x4", M24, S2, "[[x,y],[]]", "[[],[y,x]]"),
    ("gather_all_2x4", M24, S2, "[[x],[y]]", "[[],[]]"),
    ("slice_all_2x4", M24, S2, "[[],[]]", "[[x],[y]]"),
    ("replicated_src_2x4", M24, S2, "[[x],[]]", "[[y],[x]]"),
    ("row_to_col_2x4", M24, S2, "[[y],[]]", "[[],[y]]"),
    ("merge_dims_2x4", M24, S2, "[[x],[y]]", "[[x,y],[]]"),
    ("merge_other_2x4", M24, S2, "[[x],[y]]", "[[],[x,y]]"),
    ("swap_back_2x4", M24, S2, "[[y],[x]]", "[[x],[y]]"),
    ("x_to_y_2x4", M24, S2, "[[x],[]]", "[[y],[]]"),
    ("y_to_x_2x4", M24, S2, "[[y],[]]", "[[x],[]]"),
    ("drop_major_2x4", M24, S2, "[[x,y],[]]", "[[y],[]]"),
    # 2-D x=4,y=2
    ("x_to_y_4x2", M42, S2, "[[x],[]]", "[[y],[]]"),
    ("swap_axes_4x2", M42, S2, "[[x],[y]]", "[[y],[x]]"),
    ("move_and_swap_4x2", M42, S2, "[[x,y],[]]", "[[],[y,x]]"),
    ("merge_swap_4x2", M42, S2, "[[x],[y]]", "[[y,x],[]]"),
    # 3-D x=y=z=2
    ("reverse_axes_3d (issue, 8^3)", M222, (8, 8, 8), "[[x,y,z],[],[]]", "[[],[],[z,y,x]]"),
    ("reverse_axes_3d", M222, S3B, "[[x,y,z],[],[]]", "[[],[],[z,y,x]]"),
    ("rotate_3d", M222, S3, "[[x],[y],[z]]", "[[z],[x],[y]]"),
    ("merge_split_3d", M222, S3, "[[x,y],[z],[]]", "[[z],[y,x],[]]"),
    ("replicated_src_3d", M222, S3, "[[x],[],[]]", "[[],[y],[z,x]]"),
    ("gather_all_3d", M222, S3, "[[x],[y],[z]]", "[[],[],[]]"),
    ("slice_all_3d", M222, S3, "[[],[],[]]", "[[x],[y],[z]]"),
    ("reverse_within_dim_3d", M222, S3, "[[x,y,z],[],[]]", "[[z,y,x],[],[]]"),
    ("shift_dims_3d", M222, S3, "[[x],[y],[]]", "[[],[x],[y]]"),
    ("mixed_3d", M222, S3, "[[x,y],[],[z]]", "[[],[z,y],[x]]"),
]


def suite():
    """(name, mesh, shape, src, dst) of every case, types parsed."""
    out = []
    for name, mesh_text, shape, src, dst in CASES:
        mesh = Mesh.parse(mesh_text)
        out.append((name, mesh, shape, DistType.parse(src, shape, mesh), DistType.parse(dst, shape, mesh)))
    return out


def peak_with_argument(p) -> int:
    """Peak live bytes per device counted as XLA counts it: the source block stays live (the caller holds
    it) while each step holds its input and output block; a run of local slices is one step (its blocks
    in between are views), as in `Plan.peak_bytes_per_device`."""
    sizes = [t.local_size(p.mesh) * p.itemsize for t in p.trace.types]
    bounds, i = [], 0  # (index of the type before, index of the type after) of each effective step
    while i < len(p.steps):
        j = i
        while isinstance(p.steps[j], AllSlice) and j + 1 < len(p.steps) and isinstance(p.steps[j + 1], AllSlice):
            j += 1
        bounds.append((i, j + 1))
        i = j + 1
    peaks = [sizes[0]] + [sizes[0] + (sizes[a] if a else 0) + sizes[b] for a, b in bounds]
    return max(peaks)


# -- the MPI side -------------------------------------------------------------------------------------------
def worker(reps: int) -> None:
    """Under mpiexec: time every case's plan with the MPI executor; rank 0 prints {name: median seconds}."""
    from mpi4py import MPI  # optional at import time: only the worker runs under MPI

    from slicer.runtime.collectives.plan_executor import MeshExecutor

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    out, executors = {}, {}
    for name, mesh, shape, src, dst in suite():
        executor = executors.get(mesh) or executors.setdefault(mesh, MeshExecutor(mesh, comm))
        p = plan(mesh, src, dst)
        sl = block_slices(Layout.get(mesh, shape), src, rank)
        block = np.random.default_rng(rank).standard_normal(tuple(s.stop - s.start for s in sl)).astype(np.float32)
        times = []
        for _ in range(reps + 1):  # the first run warms up communicators and datatypes
            comm.Barrier()
            start = time.perf_counter()
            executor.run(p, block)
            times.append(comm.allreduce(time.perf_counter() - start, op=MPI.MAX))
        out[name] = statistics.median(times[1:])
    for executor in executors.values():
        executor.close()
    if rank == 0:
        print(json.dumps(out))
    sys.stdout.flush()


def mpi_times(reps: int, ranks: int, timeout: float, spin: bool = False) -> dict:
    """Median times of every case's plan on ``ranks`` MPI ranks. With more ranks than cores, MPICH's ranks
    spin while they wait and take the cores the others need: unless ``spin``, they are told to yield
    (``MPIR_CVAR_ENABLE_HEAVY_YIELD=1``; measured 3-5x faster collectives with 8 ranks on 2 cores)."""
    env = {} if spin or ranks <= host_cores() else {"MPIR_CVAR_ENABLE_HEAVY_YIELD": "1"}
    done = run_spmd(ranks, [sys.executable, str(Path(__file__).resolve()), "--worker", "--reps", str(reps)],
                    timeout=timeout, env=env)
    if done.returncode != 0:
        raise SystemExit(f"the MPI run failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- the comparison -----------------------------------------------------------------------------------------
def _axes(t: DistType) -> list[tuple[str, ...]]:
    return [tuple(d) for d in t.dims]


def compare(reps: int, timed: bool, ranks: int = 8, timeout: float = 1800, spin: bool = False) -> dict:
    times = mpi_times(reps, ranks, timeout, spin) if timed else {}
    rows = []
    for name, mesh, shape, src, dst in suite():
        p = plan(mesh, src, dst)
        xla = xla_hlo.compile_reshard(mesh.shape, mesh.axis_names, shape, _axes(src), _axes(dst),
                                          reps=reps if timed else 0)
        rows.append({
            "case": name, "mesh": str(mesh), "shape": "x".join(map(str, shape)), "src": str(src), "dst": str(dst),
            "slicer": {"steps": [s.op + (f"[{','.join(s.mesh_axes)}]" if hasattr(s, "mesh_axes") else "")
                                 for s in p.steps],
                       "bytes_per_device": p.bytes_received_per_device, "total_bytes": p.bytes_received_total,
                       "peak_bytes": peak_with_argument(p), "plan_peak_bytes": p.peak_bytes_per_device,
                       "estimated_s": p.estimated_seconds(), "median_s": times.get(name),
                       "lower_bound_bytes_per_device": p.lower_bound_bytes_per_device},
            "xla": {"steps": [c.op for c in xla.collectives], "bytes_per_device": xla.bytes_per_device,
                    "total_bytes": xla.total_bytes, "peak_bytes": xla.peak_bytes, "median_s": xla.median_s},
        })
    ratios = [r["slicer"]["median_s"] / r["xla"]["median_s"] for r in rows
              if r["slicer"]["median_s"] and r["xla"]["median_s"]]
    worse_bytes = [r["case"] for r in rows if r["slicer"]["bytes_per_device"] > r["xla"]["bytes_per_device"]]
    worse_peak = [r["case"] for r in rows if r["slicer"]["peak_bytes"] > r["xla"]["peak_bytes"]]
    return {"devices": 8, "reps": reps, "cases": rows, "host_cores": host_cores(),
            "mpich_yield": bool(timed and not spin and ranks > host_cores()),
            "geomean_time_ratio": math.exp(statistics.mean(math.log(x) for x in ratios)) if ratios else None,
            "more_bytes_per_device_than_xla": worse_bytes, "higher_peak_than_xla": worse_peak,
            "fewer_bytes_per_device": sum(r["slicer"]["bytes_per_device"] < r["xla"]["bytes_per_device"] for r in rows),
            "lower_peak": sum(r["slicer"]["peak_bytes"] < r["xla"]["peak_bytes"] for r in rows)}


def _size(n: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


def table(report: dict) -> str:
    lines = ["| case | mesh | shape | src -> dst | recv/dev Slicer | recv/dev XLA | total Slicer | total XLA | "
             "peak Slicer | peak XLA | ms Slicer | ms XLA | Slicer steps | XLA collectives |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["cases"]:
        s, x = r["slicer"], r["xla"]
        ms = lambda v: f"{v * 1e3:.2f}" if v else "-"  # noqa: E731
        lines.append(f"| {r['case']} | {r['mesh']} | {r['shape']} | `{r['src']}` -> `{r['dst']}` | "
                     f"{_size(s['bytes_per_device'])} | {_size(x['bytes_per_device'])} | {_size(s['total_bytes'])} | "
                     f"{_size(x['total_bytes'])} | {_size(s['peak_bytes'])} | {_size(x['peak_bytes'])} | "
                     f"{ms(s['median_s'])} | {ms(x['median_s'])} | {' '.join(s['steps']) or '-'} | "
                     f"{' '.join(x['steps']) or '-'} |")
    n = len(report["cases"])
    lines.append("")
    lines.append(f"{n} cases: Slicer receives fewer bytes per device than XLA in {report['fewer_bytes_per_device']}, "
                 f"more in {len(report['more_bytes_per_device_than_xla'])} "
                 f"{report['more_bytes_per_device_than_xla'] or ''}; "
                 f"peaks lower in {report['lower_peak']}, higher in {len(report['higher_peak_than_xla'])} "
                 f"{report['higher_peak_than_xla'] or ''}.")
    if report["geomean_time_ratio"]:
        lines.append(f"geometric-mean time ratio Slicer / XLA: {report['geomean_time_ratio']:.2f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--no-time", action="store_true", help="bytes and peaks only (no runs)")
    parser.add_argument("--spin", action="store_true",
                        help="let oversubscribed MPICH ranks spin while they wait (its default)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.reps)
        return 0
    if not xla_hlo.available():
        print("redistribution_vs_xla: JAX is not installed, nothing to compare with; "
              "install the optional extra: pip install -e '.[bench]'")
        return 0
    report = compare(args.reps, not args.no_time, spin=args.spin)
    print(table(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
