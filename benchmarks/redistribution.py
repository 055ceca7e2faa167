"""Redistribution benchmark: our plans vs the naive plan (all-gather to replicated, then slice).

Run under MPI, e.g. ``mpiexec -n 4 python benchmarks/redistribution.py --mib 16 --json out.json``.
For every case of `reshard_suite.py` it runs both plans with the MPI executor, timing each
``--reps`` times (barrier before, max over ranks per repetition, median reported), and reports the modelled
bytes received per device and peak live bytes per device. Rank 0 prints a table and writes JSON.
"""

import argparse
import json
import statistics
import sys
import time

import numpy as np
from mpi4py import MPI
from reshard_suite import cases

from slicer.redistribution import plan
from slicer.redistribution.synthesis import naive_plan
from slicer.redistribution.types import numpy_dtype
from slicer.runtime.collectives.plan_executor import MeshExecutor


def timed(comm, executor, p, block, reps):
    times = []
    for _ in range(reps + 1):  # first run warms up communicators and datatypes
        comm.Barrier()
        t = time.perf_counter()
        executor.run(p, block)
        elapsed = comm.allreduce(time.perf_counter() - t, op=MPI.MAX)
        times.append(elapsed)
    return statistics.median(times[1:])


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mib", type=float, default=16.0, help="size of each global array in MiB (<= 64)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--dtype", default="f32")
    ap.add_argument("--json", default="-", help="JSON output file ('-' = stdout after the table)")
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    rows = []
    executors = {}
    for case in cases(comm.Get_size(), int(args.mib * (1 << 20)), args.dtype):
        ex = executors.get(case.mesh) or executors.setdefault(case.mesh, MeshExecutor(case.mesh, comm))
        ours = plan(case.mesh, case.src, case.dst, dtype=args.dtype)
        naive = naive_plan(case.mesh, case.src, case.dst, dtype=args.dtype)
        # every rank builds only its own block (the whole array would not fit at large sizes on many ranks)
        block = _local_block(case, args.dtype, rank)
        row = {"case": case.name, "mesh": str(case.mesh), "shape": "x".join(map(str, case.shape)),
               "src": str(case.src), "dst": str(case.dst), "array_bytes": int(np.prod(case.shape)) * ours.itemsize}
        for name, p in (("ours", ours), ("naive", naive)):
            row[name] = {"steps": [s.op for s in p.steps], "median_s": timed(comm, ex, p, block, args.reps),
                         "bytes_received_per_device": p.bytes_received_per_device,
                         "peak_bytes_per_device": p.peak_bytes_per_device,
                         "lower_bound_bytes_per_device": p.lower_bound_bytes_per_device}
        row["speedup"] = row["naive"]["median_s"] / max(row["ours"]["median_s"], 1e-9)
        rows.append(row)
    for ex in executors.values():
        ex.close()
    if rank == 0:
        report = {"ranks": comm.Get_size(), "dtype": args.dtype, "mib": args.mib, "reps": args.reps, "cases": rows,
                  "geomean_speedup": float(np.exp(np.mean([np.log(r["speedup"]) for r in rows])))}
        print(table(report))
        text = json.dumps(report, indent=2)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as f:
                f.write(text + "\n")
    sys.stdout.flush()


def _local_block(case, dtype, rank):
    from slicer.redistribution.layout import Layout
    from slicer.redistribution.numpy_semantics import block_slices
    layout = Layout.get(case.mesh, case.shape)
    sl = block_slices(layout, case.src, rank)
    shape = tuple(s.stop - s.start for s in sl)
    rng = np.random.default_rng(rank)
    return rng.integers(-8, 8, size=shape).astype(numpy_dtype(dtype))


def table(report) -> str:
    mib = 1 << 20
    head = (f"{report['ranks']} ranks, {report['mib']:g} MiB per array, {report['dtype']}, median of "
            f"{report['reps']}\n"
            "| case | ours ms | naive ms | speedup | ours MiB recv/dev | naive MiB recv/dev | ours peak MiB | "
            "naive peak MiB |\n|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in report["cases"]:
        o, n = r["ours"], r["naive"]
        lines.append(f"| {r['case']} | {o['median_s'] * 1e3:.2f} | {n['median_s'] * 1e3:.2f} | {r['speedup']:.2f}x | "
                     f"{o['bytes_received_per_device'] / mib:.2f} | {n['bytes_received_per_device'] / mib:.2f} | "
                     f"{o['peak_bytes_per_device'] / mib:.2f} | {n['peak_bytes_per_device'] / mib:.2f} |")
    lines.append(f"geometric-mean speedup: {report['geomean_speedup']:.2f}x")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
