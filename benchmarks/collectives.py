"""Collectives benchmark: each collective step kind and the reshard suite, executed by Slicer's MPI executor,
against plain mpi4py on contiguous buffers of the same bytes and against XLA running the same reshards.

    python benchmarks/collectives.py --json collectives.json              # 2, 4, 8 ranks; ~10 min
    python benchmarks/collectives.py --ranks 8 --rounds 1 --reps 5        # quick look
    python benchmarks/collectives.py --before /tmp/base/python ...        # the executor of another checkout
    python benchmarks/collectives.py --waiting --ranks 4,8                # MPICH spinning vs sleeping
    python benchmarks/collectives.py --packing --ranks 2,8                # numpy packing vs MPI datatypes
    python benchmarks/collectives.py --compare before.json after.json     # saved runs side by side

The driver runs without MPI. Each round, for each rank count, it starts one MPI job (`mpiexec -n N`, through
`slicer.runtime.jobs.mpiexec`, so oversubscribed ranks sleep instead of spinning) running this file as a worker,
then one process with JAX on N CPU devices (`xla_reshard.py`, skipped with a message when JAX is missing):
measurements of both systems are interleaved in time, and the reported time is the median over rounds of
each round's median over `--reps` repetitions (each repetition: a barrier, then `--inner` back-to-back
executions, the slowest rank's time divided by `--inner`: one execution right after a barrier would also
measure how unevenly 8 ranks on 2 cores leave the barrier, up to a few ms; XLA is timed the same way).

Per collective kind (one axis group of all N ranks, blocks of `--kib` KiB per rank): the executor's step on a
layout whose chunks are contiguous (the gather/split/scatter dim leading) and on one where they are not
(packing needed), each next to the plain mpi4py call on preallocated contiguous buffers of the same bytes
(`Allgather`, `Alltoall`, `Allreduce`, `Reduce_scatter_block`, `Sendrecv`; a numpy copy for all_slice).
Per reshard (the suite of `reshard_suite.py` on 4 and 8 ranks, 1-D cases on 2 ranks, the cases of
issue 18 on 8 ranks): the executor running the synthesized plan, and XLA's reshard (the faster of its
`device_put` and its jitted reshard, leaving out `device_put`s whose devices share one buffer). Breakdown per step, from
repetitions with a barrier before each step: waiting (at that barrier: the ranks' skew), pack (packing and issuing the
call), transfer, unpack.

With `--before PATH` the MPI jobs import Slicer from PATH (e.g. the previous executor, `git archive` of an
older commit): its steps have no phases, so its whole step time counts as transfer.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
KINDS = ("all_gather", "all_to_all", "all_reduce", "reduce_scatter", "permute", "all_slice")


# -- cases ------------------------------------------------------------------------------------------------
def kind_cases(ranks: int, elements: int) -> list[dict]:
    """One step of each kind over all ranks, on a layout whose chunks are contiguous (no packing) and on one
    where they are not, with source blocks of about `elements` f32 each."""
    m = 4 * ranks  # every local size divisible by any group
    side = max(m, int(math.sqrt(elements)) // m * m)
    cube = max(m, int(round(elements ** (1 / 3))) // m * m)
    square = (side, side)
    x = f"x={ranks}"
    out = [
        ("all_gather", "contiguous", x, "[[x],[]]", "[[],[]]", square),
        ("all_gather", "strided", x, "[[],[x]]", "[[],[]]", square),
        # split dim 0 with k rows: each chunk is one row; the concatenated output is a single row
        ("all_to_all", "contiguous", x, "[[],[x]]", "[[x],[]]", (ranks, max(m, elements // ranks // m * m))),
        ("all_to_all", "strided", x, "[[],[x],[]]", "[[],[],[x]]", (cube, cube, cube)),
        ("all_reduce", "contiguous", x, "[[],[]] partial=[x]", "[[],[]]", square),
        ("reduce_scatter", "contiguous", x, "[[],[]] partial=[x]", "[[x],[]]", square),
        ("reduce_scatter", "strided", x, "[[],[]] partial=[x]", "[[],[x]]", square),
        ("all_slice", "contiguous", x, "[[],[]]", "[[x],[]]", square),
        ("all_slice", "strided", x, "[[],[]]", "[[],[x]]", square),
    ]
    if ranks >= 4:  # a permute needs two equal axes
        out.append(("permute", "contiguous", "x=2,y=2" if ranks == 4 else "x=2,y=2,z=2", "[[x],[y]]", "[[y],[x]]",
                    square))
    return [dict(zip(("kind", "layout", "mesh", "src", "dst", "local"), c)) for c in out]


def reshard_cases(ranks: int, mib: float) -> list[dict]:
    """The reshards compared with XLA on `ranks` devices (global arrays of about `mib` MiB, f32)."""
    from reshard_suite import cases
    out = []
    if ranks >= 4:
        for c in cases(ranks, int(mib * (1 << 20)), "f32"):
            out.append({"name": c.name, "mesh": str(c.mesh), "shape": list(c.shape), "src": str(c.src),
                        "dst": str(c.dst)})
    else:
        side = int(round(math.sqrt(mib * (1 << 20) / 4))) // 8 * 8
        for name, src, dst in (("replicate_to_tiled", "[[],[]]", "[[x],[]]"),
                               ("tiled_to_replicate", "[[x],[]]", "[[],[]]"),
                               ("dim_move", "[[x],[]]", "[[],[x]]"), ("col_gather", "[[],[x]]", "[[],[]]"),
                               ("partial_to_tiled", "[[],[]] partial=[x]", "[[x],[]]"),
                               ("partial_to_replicated", "[[],[]] partial=[x]", "[[],[]]")):
            out.append({"name": name, "mesh": f"x={ranks}", "shape": [side, side], "src": src, "dst": dst})
    if ranks == 8:  # the cases named in issue 18
        for side in (128, 256):
            out.append({"name": f"issue18_a2a3d_{side}", "mesh": "x=2,y=2,z=2", "shape": [side] * 3,
                        "src": "[[x,y,z],[],[]]", "dst": "[[],[],[x,y,z]]"})
        out.append({"name": "issue18_swap_2x4_1024", "mesh": "x=2,y=4", "shape": [1024, 1024], "src": "[[x],[y]]",
                    "dst": "[[y],[x]]"})
        out.append({"name": "issue18_gather_2x4_1024", "mesh": "x=2,y=4", "shape": [1024, 1024],
                    "src": "[[x,y],[]]", "dst": "[[],[]]"})
        out.append({"name": "issue18_row_to_col_2x4_4096", "mesh": "x=2,y=4", "shape": [4096, 4096],
                    "src": "[[x,y],[]]", "dst": "[[],[x,y]]"})
    return out


# -- worker (under mpiexec) --------------------------------------------------------------------------------
def _max(comm, value):
    from mpi4py import MPI
    return comm.allreduce(value, op=MPI.MAX)


def _one_step_plan(mesh, shape, src, dst):
    from slicer.redistribution import DistType, plan
    p = plan(mesh, DistType.parse(src, shape, mesh), DistType.parse(dst, shape, mesh))
    return p


def _executor_module():
    """The plan executor's module: `slicer.runtime.collectives.plan_executor`, or in a checkout from before the move
    (``--before``) `slicer.redistribution.mpi_exec`."""
    try:
        from slicer.runtime.collectives import plan_executor
        return plan_executor
    except ImportError:
        from slicer.redistribution import mpi_exec
        return mpi_exec


def _packing_module():
    """The packing module (`slicer.runtime.collectives.mpi_packing`, or `slicer.redistribution.packing` before the
    move)."""
    try:
        from slicer.runtime.collectives import mpi_packing
        return mpi_packing
    except ImportError:
        from slicer.redistribution import packing
        return packing


def _plain(comm, ex, step, block, out):
    """The plain mpi4py call moving the bytes of `step` between preallocated contiguous buffers."""
    from mpi4py import MPI

    from slicer.redistribution import AllGather, AllReduce, AllSlice, AllToAll, Permute
    if isinstance(step, Permute):
        pairs = [tuple(map(int, p)) for p in step.pairs]
        dest = [d for s, d in pairs if s == ex.rank]
        source = [s for s, d in pairs if d == ex.rank]
        if dest:
            return lambda: ex.cart.Sendrecv(block, dest=dest[0], recvbuf=out, source=source[0])
        return lambda: None
    if isinstance(step, AllSlice):
        flat_out, flat_in = out.reshape(-1), block.reshape(-1)[: out.size]
        return lambda: np.copyto(flat_out, flat_in)
    sub = ex.sub(step.mesh_axes)
    if isinstance(step, AllGather):
        return lambda: sub.Allgather(block, out)
    if isinstance(step, AllToAll):
        return lambda: sub.Alltoall(block, out)
    if isinstance(step, AllReduce):
        return lambda: sub.Allreduce(block, out, op=MPI.SUM)
    return lambda: sub.Reduce_scatter_block(block, out, op=MPI.SUM)


def _timed_steps(comm, ex, p, block):
    """One run of plan `p` with a barrier before each step: per step (waiting, pack, transfer, unpack)."""
    MeshExecutor = _executor_module().MeshExecutor
    rows = []
    new = hasattr(MeshExecutor, "plan_program")
    programs = ex.plan_program(p, block.shape, block.dtype).programs if new else None
    for i, (step, before) in enumerate(zip(p.steps, p.trace.types)):
        t0 = time.perf_counter()
        comm.Barrier()
        t1 = time.perf_counter()
        if new:
            block, ph = programs[i].run(block, programs[i].owned_out if i < len(p.steps) - 1 else None)
            parts = (t1 - t0, ph.pack + ph.issue, ph.transfer, ph.unpack)
        else:
            block = ex.step(step, before, block)
            parts = (t1 - t0, 0.0, time.perf_counter() - t1, 0.0)
        rows.append(parts)
    return rows


def worker(args) -> None:
    from mpi4py import MPI

    from slicer.redistribution import DistType, Mesh
    MeshExecutor = _executor_module().MeshExecutor

    comm = MPI.COMM_WORLD
    ranks, rank = comm.Get_size(), comm.Get_rank()
    executors = {}

    def executor(mesh):
        return executors.get(mesh) or executors.setdefault(mesh, MeshExecutor(mesh, comm))

    def block_of(mesh, t):
        rng = np.random.default_rng(rank)
        return rng.integers(-8, 8, size=t.local_shape(mesh)).astype(np.float32)

    report = {"ranks": ranks, "kinds": [], "reshards": []}
    for case in kind_cases(ranks, int(args.kib * 1024 // 4)):
        mesh = Mesh.parse(case["mesh"])
        src_dims = DistType.parse(case["src"], case["local"], mesh).dims
        shape = tuple(n * mesh.group_size(d) for n, d in zip(case["local"], src_dims))
        p = _one_step_plan(mesh, shape, case["src"], case["dst"])
        if [s.op for s in p.steps] != [case["kind"]]:
            if rank == 0:
                print(f"skipping {case}: planned as {[s.op for s in p.steps]}", file=sys.stderr)
            continue
        ex = executor(mesh)
        step, before = p.steps[0], p.trace.types[0]
        block = block_of(mesh, p.src)
        out = np.empty(step.type_after.local_shape(mesh), np.float32)
        plain = _plain(comm, ex, step, block, out)
        variants = {"slicer": lambda ex=ex, step=step, before=before, block=block: ex.step(step, before, block),
                    "mpi4py": plain}
        times = {k: [] for k in variants}
        parts = []
        for rep in range(args.reps + 2):
            for name, fn in variants.items():
                comm.Barrier()
                t = time.perf_counter()
                for _ in range(args.inner):
                    fn()
                elapsed = _max(comm, time.perf_counter() - t) / args.inner
                if rep >= 2:
                    times[name].append(elapsed)
            row = _timed_steps(comm, ex, p, block)
            if rep >= 2:
                parts.append([_max(comm, v) for v in row[0]])
        report["kinds"].append(dict(case, shape=list(shape), bytes_per_rank=int(block.nbytes),
                                    slicer_s=statistics.median(times["slicer"]),
                                    mpi4py_s=statistics.median(times["mpi4py"]),
                                    breakdown=[statistics.median(c) for c in zip(*parts)]))
    for case in json.loads(Path(args.cases).read_text()):
        mesh = Mesh.parse(case["mesh"])
        shape = tuple(case["shape"])
        p = _one_step_plan(mesh, shape, case["src"], case["dst"])
        ex = executor(mesh)
        block = block_of(mesh, p.src)
        times, parts = [], []
        for rep in range(args.reps + 2):
            comm.Barrier()
            t = time.perf_counter()
            for _ in range(args.inner):
                ex.run(p, block)
            elapsed = _max(comm, time.perf_counter() - t) / args.inner
            rows = _timed_steps(comm, ex, p, block)
            rows = [[_max(comm, v) for v in row] for row in rows]
            if rep >= 2:
                times.append(elapsed)
                parts.append(rows)
        steps = [{"op": s.op, "fields": {"pairs": len(s.pairs)} if hasattr(s, "pairs") else s.fields(),
                  "breakdown": [statistics.median(r[i][j] for r in parts) for j in range(4)]}
                 for i, s in enumerate(p.steps)]
        report["reshards"].append(dict(case, steps=steps, slicer_s=statistics.median(times),
                                       bytes_received_per_device=p.bytes_received_per_device))
    for ex in executors.values():
        ex.close()
    if rank == 0:
        print(json.dumps(report), flush=True)


def micro_worker(args) -> None:
    """Plain MPI latency and bandwidth (for --waiting): medians of a 768-byte Allreduce, a 1 MiB-per-rank
    Alltoall and a Barrier, each repetition after a barrier."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    small, small_out = np.ones(192, np.float32), np.empty(192, np.float32)
    big, big_out = np.ones(1 << 18, np.float32), np.empty(1 << 18, np.float32)
    calls = {"allreduce_768B": lambda: comm.Allreduce(small, small_out),
             "alltoall_1MiB": lambda: comm.Alltoall(big, big_out), "barrier": comm.Barrier}
    times = {k: [] for k in calls}
    for rep in range(args.reps * 5 + 5):
        for name, fn in calls.items():
            comm.Barrier()
            t = time.perf_counter()
            fn()
            elapsed = _max(comm, time.perf_counter() - t)
            if rep >= 5:
                times[name].append(elapsed)
    if comm.Get_rank() == 0:
        print(json.dumps({k: statistics.median(v) for k, v in times.items()}), flush=True)


def datatype_worker(args) -> None:
    """(for --packing) An all_to_all whose chunks are not contiguous: MPI vector datatypes (the previous
    executor) vs numpy packing into contiguous buffers, blocks of (side/k, side, side) f32 split on the last
    dim, each repetition after a barrier, slowest rank."""
    from mpi4py import MPI

    Chunks = _packing_module().Chunks

    comm = MPI.COMM_WORLD
    k, side = comm.Get_size(), args.side
    block = np.ones((side // k, side, side), np.float32)
    chunks = Chunks(block.shape, 2, k, block.dtype)
    send, recv = np.empty(chunks.packed_shape, np.float32), np.empty(chunks.packed_shape, np.float32)
    out = np.empty((side, side, side // k), np.float32)
    inner = side // k
    vector = MPI.FLOAT.Create_vector(side // k * side, inner, side).Create_resized(0, inner * 4)
    vector.Commit()
    calls = {"datatype": lambda: comm.Alltoall([block, 1, vector], [out, out.size // k, MPI.FLOAT]),
             "packed": lambda: (chunks.pack(block, send), comm.Alltoall(send, recv)),
             "contiguous": lambda: comm.Alltoall(send, recv)}
    times = {name: [] for name in calls}
    for rep in range(args.reps + 2):
        for name, fn in calls.items():
            comm.Barrier()
            t = time.perf_counter()
            fn()
            if rep >= 2:
                times[name].append(_max(comm, time.perf_counter() - t))
    vector.Free()
    if comm.Get_rank() == 0:
        print(json.dumps({name: statistics.median(v) for name, v in times.items()}), flush=True)


def packing(args) -> None:
    """How to pack: numpy element-wise strided copy vs whole runs as `void` elements vs one memcpy of the same
    bytes (one process); and MPI vector datatypes vs packing (MPI jobs)."""
    Chunks = _packing_module().Chunks
    from slicer.runtime.jobs.mpiexec import run_spmd

    def median_time(fn, reps=20):
        samples = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t)
        return statistics.median(samples)

    lines = ["| block (f32) | chunks | run bytes | element-wise ms | void runs ms | memcpy ms |",
             "|---|---|---|---|---|---|"]
    for shape, axis, k in (((16, 128, 128), 2, 8), ((64, 64, 64), 2, 4), ((4096, 256), 1, 8), ((128, 256, 256), 2, 8),
                           ((2048, 2048), 1, 2)):
        block = np.random.default_rng(0).random(shape, dtype=np.float32)
        chunks = Chunks(shape, axis, k, block.dtype)
        packed = np.empty(chunks.packed_shape, np.float32)
        split = shape[:axis] + (k, shape[axis] // k) + shape[axis + 1:]
        view = np.moveaxis(block.reshape(split), axis, 0)
        flat = np.empty(block.size, np.float32)
        element = median_time(lambda packed=packed, view=view: np.copyto(packed, view))
        runs = median_time(lambda chunks=chunks, block=block, packed=packed: chunks.pack(block, packed))
        memcpy = median_time(lambda flat=flat, block=block: np.copyto(flat, block.reshape(-1)))
        lines.append(f"| {'x'.join(map(str, shape))} | {k} along dim {axis} | {chunks.run_bytes} | "
                     f"{element * 1e3:.3f} | "
                     f"{runs * 1e3:.3f} | {memcpy * 1e3:.3f} |")
    lines += ["", "| ranks | block per rank | MPI vector datatype ms | numpy pack + Alltoall ms | Alltoall alone ms |",
              "|---|---|---|---|---|"]
    for ranks in (int(r) for r in args.ranks.split(",")):
        for side in (64, 128):
            done = run_spmd(ranks, [sys.executable, str(Path(__file__).resolve()), "--datatype", "--side", str(side),
                                    "--reps", str(args.reps)], timeout=600)
            row = json.loads(done.stdout.strip().splitlines()[-1])
            lines.append(f"| {ranks} | {side // ranks}x{side}x{side} | {row['datatype'] * 1e3:.3f} | "
                         f"{row['packed'] * 1e3:.3f} | {row['contiguous'] * 1e3:.3f} |")
    print("\n".join(lines))


def waiting(args) -> None:
    """MPICH spinning vs sleeping while a rank waits (SLICER_MPI_YIELD=0/1), interleaved: plain MPI calls and
    sequence-parallel attention (examples/mha.mlir, arg0.0=x) run by the runtime."""
    import slicer
    from slicer.runtime.jobs.mpiexec import run_spmd

    text = (HERE.parent / "examples" / "mha.mlir").read_text()
    rows = []
    for ranks in (int(r) for r in args.ranks.split(",")):
        prog = slicer.compile(text, mesh=slicer.Mesh(x=ranks), tactics=slicer.parse_tactics("arg0.0=x"))
        rng = np.random.default_rng(0)
        inputs = [rng.standard_normal(prog.graph.values[a].dist.shape).astype(np.float32) for a in prog.graph.args]
        got = {}
        for _ in range(args.rounds):
            for setting in ("0", "1"):
                os.environ["SLICER_MPI_YIELD"] = setting
                done = run_spmd(ranks, [sys.executable, str(Path(__file__).resolve()), "--micro", "--reps",
                                        str(args.reps)], timeout=600)
                micro = json.loads(done.stdout.strip().splitlines()[-1])
                _, timings = prog.run(*inputs, ranks=ranks, repeat=20, return_timings=True, oversubscribe=True)
                micro["mha_program"] = timings.seconds
                for k, v in micro.items():
                    got.setdefault((setting, k), []).append(v)
        os.environ.pop("SLICER_MPI_YIELD", None)
        for what in ("allreduce_768B", "alltoall_1MiB", "barrier", "mha_program"):
            spin, sleep = (statistics.median(got[(s, what)]) for s in ("0", "1"))
            rows.append({"ranks": ranks, "what": what, "spinning_s": spin, "sleeping_s": sleep})
    lines = ["| ranks | what | spinning ms | sleeping ms | speedup |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['ranks']} | {r['what']} | {r['spinning_s'] * 1e3:.3f} | {r['sleeping_s'] * 1e3:.3f} | "
                     f"{r['spinning_s'] / r['sleeping_s']:.2f}x |")
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "waiting": rows}, indent=1) + "\n")


# -- driver -----------------------------------------------------------------------------------------------
def run_mpi(ranks: int, args, cases_file: str) -> dict:
    from slicer.runtime.jobs.mpiexec import run_spmd
    env = {"SLICER_COLLECTIVES": args.strategy}
    if args.before:
        env["PYTHONPATH"] = os.pathsep.join([args.before, os.environ.get("PYTHONPATH", "")])
    done = run_spmd(ranks, [sys.executable, str(Path(__file__).resolve()), "--worker", "--cases", cases_file,
                            "--reps", str(args.reps), "--inner", str(args.inner), "--kib", str(args.kib)],
                    timeout=3600, env=env)
    if done.returncode != 0:
        raise SystemExit(f"MPI job on {ranks} ranks failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_xla(ranks: int, args, cases_file: str) -> dict | str:
    """name -> best median seconds over the methods, or why XLA was skipped."""
    done = subprocess.run([sys.executable, str(HERE / "xla_reshard.py"), "--devices", str(ranks), "--cases", cases_file,
                           "--reps", str(args.reps), "--inner", str(args.inner)], capture_output=True, text=True,
                          timeout=3600)
    if done.returncode != 0:
        return f"XLA failed: {done.stderr.strip()[-500:]}"
    best, methods = {}, {}
    for line in done.stdout.splitlines():
        row = json.loads(line)
        if "skipped" in row and "name" not in row:
            return row["skipped"]
        if "median_s" in row:
            methods.setdefault(row["name"], {})[row["method"]] = (row["median_s"], row.get("aliased", False))
    for name, m in methods.items():
        honest = [t for t, aliased in m.values() if not aliased]  # aliased replicas moved no data
        best[name] = {"best_s": min(honest or [t for t, _ in m.values()]),
                      **{f"{k}_s": t for k, (t, _) in m.items()},
                      **{f"{k}_aliased": a for k, (_, a) in m.items()}}
    return best


def median_of(rounds: list, key) -> float:
    return statistics.median(key(r) for r in rounds)


def aggregate(per_round: list[dict], xla_rounds: list) -> dict:
    """Median over rounds, case by case."""
    first = per_round[0]
    kinds = []
    for i, case in enumerate(first["kinds"]):
        rows = [r["kinds"][i] for r in per_round]
        kinds.append(dict(case, slicer_s=median_of(rows, lambda r: r["slicer_s"]),
                          mpi4py_s=median_of(rows, lambda r: r["mpi4py_s"]),
                          breakdown=[statistics.median(r["breakdown"][j] for r in rows) for j in range(4)]))
    reshards = []
    xla_ok = [x for x in xla_rounds if isinstance(x, dict)]
    for i, case in enumerate(first["reshards"]):
        rows = [r["reshards"][i] for r in per_round]
        steps = [dict(s, breakdown=[statistics.median(r["steps"][k]["breakdown"][j] for r in rows) for j in range(4)])
                 for k, s in enumerate(case["steps"])]
        row = dict(case, steps=steps, slicer_s=median_of(rows, lambda r: r["slicer_s"]))
        xs = [x[case["name"]] for x in xla_ok if case["name"] in x]
        if xs:
            row["xla_s"] = statistics.median(x["best_s"] for x in xs)
            for method in ("jit", "device_put"):
                got = [x[f"{method}_s"] for x in xs if f"{method}_s" in x]
                if got:
                    row[f"xla_{method}_s"] = statistics.median(got)
        reshards.append(row)
    skipped = next((x for x in xla_rounds if isinstance(x, str)), None)
    return {"ranks": first["ranks"], "kinds": kinds, "reshards": reshards, "xla_skipped": skipped}


def geomean(xs) -> float:
    xs = list(xs)
    return float(np.exp(np.mean(np.log(xs)))) if xs else float("nan")


def table(results: list[dict]) -> str:
    lines = [
        "### Collective kinds: the executor's step vs plain mpi4py on contiguous buffers of the same bytes",
        "",
        "| ranks | kind | chunks | KiB/rank | slicer ms | mpi4py ms | ratio | waiting | pack | transfer | unpack |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for res in results:
        for k in res["kinds"]:
            b = k["breakdown"]
            lines.append(f"| {res['ranks']} | {k['kind']} | {k['layout']} | {k['bytes_per_rank'] / 1024:.0f} | "
                         f"{k['slicer_s'] * 1e3:.3f} | {k['mpi4py_s'] * 1e3:.3f} | "
                         f"{k['slicer_s'] / k['mpi4py_s']:.2f}x | " + " | ".join(f"{v * 1e3:.3f}" for v in b) + " |")
    lines += ["", "### Reshards: the executor vs XLA (speedup = XLA time / Slicer time)", "",
              "| ranks | case | mesh | shape | plan | slicer ms | XLA ms | speedup | per step: "
              "waiting/pack/transfer/unpack ms |",
              "|---|---|---|---|---|---|---|---|---|"]
    speedups = []
    for res in results:
        for r in res["reshards"]:
            xla = r.get("xla_s")
            speed = f"{xla / r['slicer_s']:.2f}x" if xla else "-"
            if xla:
                speedups.append(xla / r["slicer_s"])
            steps = "; ".join(f"{s['op']} " + "/".join(f"{v * 1e3:.2f}" for v in s["breakdown"]) for s in r["steps"])
            lines.append(f"| {res['ranks']} | {r['name']} | {r['mesh']} | {'x'.join(map(str, r['shape']))} | "
                         f"{len(r['steps'])} steps | {r['slicer_s'] * 1e3:.3f} | "
                         f"{xla * 1e3 if xla else float('nan'):.3f} | {speed} | {steps} |")
    if speedups:
        lines.append("")
        lines.append(f"geometric-mean speedup over XLA: {geomean(speedups):.2f}x; slower than XLA by more than 10%: "
                     f"{sum(s < 1 / 1.1 for s in speedups)} of {len(speedups)}")
    for res in results:
        if res.get("xla_skipped"):
            lines.append(f"XLA skipped on {res['ranks']} ranks: {res['xla_skipped']}")
    return "\n".join(lines)


def compare(paths: list[str]) -> str:
    """Markdown tables side by side from the JSON of several runs (e.g. before, after, after with MPI):
    `--compare before.json after.json mpi.json`. XLA times come from the last file that has them."""
    runs = [(Path(p).stem, json.loads(Path(p).read_text())["results"]) for p in paths]
    names = [n for n, _ in runs]
    lines = ["| ranks | kind | chunks | " + " | ".join(f"{n} ms (ratio)" for n in names) + " | mpi4py ms |",
             "|---|---|---|" + "---|" * len(names) + "---|"]
    first = runs[-1][1]
    for ri, res in enumerate(first):
        for ki, k in enumerate(res["kinds"]):
            cells = []
            for _, results in runs:
                other = results[ri]["kinds"][ki]
                cells.append(f"{other['slicer_s'] * 1e3:.3f} ({other['slicer_s'] / other['mpi4py_s']:.2f}x)")
            lines.append(f"| {res['ranks']} | {k['kind']} | {k['layout']} | " + " | ".join(cells)
                         + f" | {k['mpi4py_s'] * 1e3:.3f} |")
    lines += ["", "| ranks | case | " + " | ".join(f"{n} ms" for n in names) + " | XLA ms | "
              + " | ".join(f"{n} vs XLA" for n in names) + " |",
              "|---|---|" + "---|" * (2 * len(names) + 1)]
    speed = {n: [] for n in names}
    for ri, res in enumerate(first):
        for ci, case in enumerate(res["reshards"]):
            xla = next((r[ri]["reshards"][ci].get("xla_s") for _, r in reversed(runs)
                        if r[ri]["reshards"][ci].get("xla_s")), None)
            times = [r[ri]["reshards"][ci]["slicer_s"] for _, r in runs]
            ratios = []
            for n, t in zip(names, times):
                if xla:
                    speed[n].append(xla / t)
                ratios.append(f"{xla / t:.2f}x" if xla else "-")
            lines.append(f"| {res['ranks']} | {case['name']} | " + " | ".join(f"{t * 1e3:.3f}" for t in times)
                         + f" | {xla * 1e3 if xla else float('nan'):.3f} | " + " | ".join(ratios) + " |")
    lines.append("")
    for n in names:
        if speed[n]:
            lines.append(f"- {n}: geometric-mean speedup over XLA {geomean(speed[n]):.2f}x; slower than XLA by more "
                         f"than 10% in {sum(v < 1 / 1.1 for v in speed[n])} of {len(speed[n])}")
    lines += ["", "Per step (waiting / pack / transfer / unpack, ms):", "",
              "| ranks | case | step | " + " | ".join(names) + " |", "|---|---|---|" + "---|" * len(names)]
    for ri, res in enumerate(first):
        for ci, case in enumerate(res["reshards"]):
            plans = [r[ri]["reshards"][ci]["steps"] for _, r in runs]
            for si, step in enumerate(plans[-1]):
                cells = []
                for steps in plans:
                    same = si < len(steps) and steps[si]["op"] == step["op"]
                    cells.append("/".join(f"{v * 1e3:.2f}" for v in steps[si]["breakdown"]) if same else "-")
                lines.append(f"| {res['ranks']} | {case['name']} | {step['op']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="2,4,8")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (MPI job, then XLA) per rank count")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--inner", type=int, default=5,
                    help="back-to-back executions per repetition (the time is divided by it), for both systems")
    ap.add_argument("--kib", type=float, default=1024, help="KiB per rank for the collective kinds")
    ap.add_argument("--mib", type=float, default=4, help="MiB per global array for the suite reshards")
    ap.add_argument("--no-xla", action="store_true")
    ap.add_argument("--kinds-only", action="store_true", help="only the collective kinds, no reshards")
    ap.add_argument("--before", help="import Slicer from this python/ directory in the MPI jobs")
    ap.add_argument("--strategy", default="auto", choices=("auto", "mpi", "shm"),
                    help="the executor's collectives: shared memory on one host (auto, shm) or MPI")
    ap.add_argument("--json", help="write all results here")
    ap.add_argument("--waiting", action="store_true",
                    help="instead: MPICH spinning vs sleeping while waiting (plain MPI calls, attention program)")
    ap.add_argument("--compare", nargs="+", metavar="JSON", help="instead: tables side by side from saved runs")
    ap.add_argument("--packing", action="store_true", help="instead: ways to pack non-contiguous chunks")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--datatype", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--side", type=int, default=128, help=argparse.SUPPRESS)
    ap.add_argument("--micro", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--cases", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args)
        return
    if args.micro:
        micro_worker(args)
        return
    if args.datatype:
        datatype_worker(args)
        return
    if args.packing:
        packing(args)
        return
    if args.waiting:
        waiting(args)
        return
    if args.compare:
        print(compare(args.compare))
        return
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for ranks in (int(r) for r in args.ranks.split(",")):
            cases_file = str(Path(tmp) / f"cases{ranks}.json")
            Path(cases_file).write_text(json.dumps([] if args.kinds_only else reshard_cases(ranks, args.mib)))
            mpi_rounds, xla_rounds = [], []
            for _ in range(args.rounds):
                mpi_rounds.append(run_mpi(ranks, args, cases_file))
                if args.no_xla or args.kinds_only:
                    xla_rounds.append("--no-xla given")
                else:
                    xla_rounds.append(run_xla(ranks, args, cases_file))
            results.append(aggregate(mpi_rounds, xla_rounds))
            print(f"{ranks} ranks done", file=sys.stderr, flush=True)
    print(table(results))
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
