"""`slicer-run`: partition a program and run it on N local MPI ranks.

    slicer-run PROGRAM.mlir --mesh x=2,y=2 [--tactic arg1.1=y ...] [-n N]
               [--inputs a.npy,b.npy | --random SEED] [--out DIR] [--check] [--entry NAME] [--mpiexec PATH]
               [--repeat N] [--oversubscribe] [--timeout SECONDS]
               [--explain] [--show VALUE ...] [--plot DIR] [--trace FILE]

`--tactic argI.D=AXES` tiles dim D of argument I over AXES (comma-separated, major
to minor); `argI=replicated`; `resultI.D=AXES` for results. Each rank reads or
creates only its own block of each input; rank 0 assembles the results into
`--out` as `result<i>.npy`. `--check` compares them with the unpartitioned
program run in one process. Under `mpiexec -n N python -m slicer.runtime ...`
the same command runs in the current MPI job instead of starting one.

Seeing the partitioning (slicer.viz): `--explain` prints the whole report (propagation, memory per device,
kernel graph) and, after the run, the memory each rank measured and the run's timeline; `--show VALUE`
prints which device holds which block of a value (`arg1`, `result0`, `%4`, or a source name such as `w1`);
`--plot DIR` draws that for every value of the kernel graph and the run's timeline as PNG files (needs
matplotlib); `--trace FILE` writes the timeline as a Chrome trace (chrome://tracing, ui.perfetto.dev).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from slicer.api import compile
from slicer.core.errors import InputError, RunError, SlicerError
from slicer.core.mesh import Mesh
from slicer.lowering import cache_stats, compile_function
from slicer.runtime import launch
from slicer.runtime.blocks import random_global
from slicer.runtime.job import run_job
from slicer.runtime.timings import TIMINGS_FILE
from slicer.runtime.rank import run_rank
from slicer.runtime.resources import check_memory, check_ranks
from slicer.runtime.timings import Timings
from slicer.tactics import parse_tactics
from slicer.viz import timeline_png, timeline_text, value_picture, write_chrome_trace
from slicer.viz.sharding import load_pyplot
from slicer.viz.values import describe, source_names


def parse_args(argv):
    p = argparse.ArgumentParser(prog="slicer-run", description=__doc__.splitlines()[0])
    p.add_argument("program")
    p.add_argument("--mesh", required=True, help="named axes with sizes, major to minor, e.g. x=2,y=2")
    p.add_argument("--tactic", action="append", default=[], help="argI.D=AXES | argI=replicated | resultI.D=AXES")
    p.add_argument("-n", type=int, default=None, help="number of ranks (default: the mesh's device count)")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--inputs", help="comma-separated .npy files, one per argument")
    source.add_argument("--random", type=int, default=None, metavar="SEED", help="random inputs (default seed 0)")
    p.add_argument("--out", help="directory for result<i>.npy (default: a temporary directory)")
    p.add_argument("--check", action="store_true", help="compare with the unpartitioned program")
    p.add_argument("--entry", help="the function to run (default: the module's single public function)")
    p.add_argument("--mpiexec", help="mpiexec to use (default: beside this Python, then PATH)")
    p.add_argument("--timeout", type=float, default=600, help="seconds before the job is stopped")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="timed runs; each step is reported as the median over them of the slowest rank")
    p.add_argument("--oversubscribe", action="store_true",
                   help="allow more local ranks than this host has cores (each rank then gets part of a core)")
    p.add_argument("--explain", action="store_true",
                   help="the whole report: propagation, memory per device (estimated and measured), kernel graph, "
                        "the run's timeline")
    p.add_argument("--show", action="append", default=[], metavar="VALUE",
                   help="print which device holds which block of VALUE: arg1, result0, %%4 or a source name (w1)")
    p.add_argument("--plot", metavar="DIR",
                   help="write PNG pictures of every value's blocks and the run's timeline to DIR (matplotlib)")
    p.add_argument("--trace", metavar="FILE", help="write the run's timeline as a Chrome trace (JSON) to FILE")
    return p.parse_args(argv)


def _reference_inputs(prog, args) -> list[np.ndarray]:
    g = prog.graph
    if args.inputs:
        return [np.load(path) for path in args.inputs.split(",")]
    seed = args.random or 0
    return [random_global(seed + i, g.values[n].dist.shape, g.values[n].numpy_dtype) for i, n in enumerate(g.args)]


def _check_input_files(prog, paths: list[str]) -> None:
    g = prog.graph
    if len(paths) != len(g.args):
        raise InputError(f"@{g.entry} takes {len(g.args)} inputs, --inputs gives {len(paths)}")
    for i, (path, name) in enumerate(zip(paths, g.args)):
        if not Path(path).is_file():
            raise InputError(f"input file '{path}' (argument #{i}) does not exist")
        try:
            header = np.load(path, mmap_mode="r")
        except (ValueError, OSError, EOFError) as exc:
            raise InputError(f"input file '{path}' (argument #{i}) is not a readable .npy file ({exc}); write it "
                             "with numpy.save") from None
        v = g.values[name]
        if tuple(header.shape) != tuple(v.dist.shape) or header.dtype != v.numpy_dtype:
            raise InputError(f"input file '{path}' holds {header.dtype}{list(header.shape)}, but argument #{i} of "
                             f"@{g.entry} is {v.numpy_dtype}{list(v.dist.shape)}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return run(args)
    except (SlicerError, OSError) as exc:
        print(f"slicer-run: error: {exc}", file=sys.stderr)
        return 1


def run(args) -> int:
    mesh = Mesh.parse(args.mesh)
    tactics = parse_tactics(";".join(args.tactic))
    text = Path(args.program).read_text()
    start = time.perf_counter()
    prog = compile(text, mesh=mesh, tactics=tactics, entry=args.entry, source_name=args.program)
    comm = _mpi_job_comm()
    lead = comm is None or comm.Get_rank() == 0
    if args.plot:
        load_pyplot()  # no matplotlib: say so before running anything
    if lead:
        print(f"== compiled {args.program} for mesh {mesh} in {time.perf_counter() - start:.2f} s")
        print(prog.explain() if args.explain else prog.explain().split("propagation:")[0].rstrip())
        for what in args.show:
            print(value_picture(prog.graph, what, text).text())
    ranks = args.n or (comm.Get_size() if comm is not None else mesh.device_count)
    if ranks != mesh.device_count:
        raise RunError(f"the mesh {mesh} has {mesh.device_count} devices; use -n {mesh.device_count}")
    inputs = args.inputs.split(",") if args.inputs else None
    if inputs:
        _check_input_files(prog, inputs)
    if comm is not None:
        return _run_in_job(prog, args, comm, inputs)
    check_ranks(ranks, args.oversubscribe)
    reference = 0
    if args.check:  # the unpartitioned reference holds the whole arguments and results in this process
        reference = sum(_global_bytes(prog.graph, n) for n in prog.graph.args + prog.graph.results)
    check_memory(prog.graph, ranks, extra=reference)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="slicer-run-"))
    out.mkdir(parents=True, exist_ok=True)
    before = cache_stats().misses
    results, timings = launch(prog.graph, out, ranks, inputs=inputs, seed=args.random or 0, repeat=args.repeat,
                              timeout=args.timeout, mpiexec=args.mpiexec)
    compiled = cache_stats().misses - before
    print(f"== kernels: {'compiled ' + str(compiled) + ' library' if compiled else 'all from the cache, nothing compiled'}")
    return _report(prog, args, text, out, results, timings)


def _global_bytes(graph, name: str) -> int:
    v = graph.values[name]
    return int(np.prod(v.dist.shape, dtype=np.int64)) * v.numpy_dtype.itemsize


def _mpi_job_comm():
    """COMM_WORLD when this process is one rank of a multi-rank MPI job (mpiexec -n N python -m ...)."""
    if int(os.environ.get("PMI_SIZE", os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))) <= 1:
        return None
    from mpi4py import MPI  # only inside an MPI job

    return MPI.COMM_WORLD


def _run_in_job(prog, args, comm, inputs) -> int:
    """Every rank of the current job runs its part; rank 0 writes the results and reports."""
    if comm.Get_size() != prog.mesh.device_count:
        raise RunError(f"this MPI job has {comm.Get_size()} ranks but the mesh {prog.mesh} has "
                       f"{prog.mesh.device_count} devices")
    out = Path(args.out) if args.out else None
    if comm.Get_rank() == 0:
        out = out or Path(tempfile.mkdtemp(prefix="slicer-run-"))
        out.mkdir(parents=True, exist_ok=True)
        (out / "graph.json").write_text(prog.graph.to_json())
        (out / "job.json").write_text(json.dumps({"inputs": inputs, "seed": args.random or 0, "repeat": args.repeat}))
    out = Path(comm.bcast(str(out) if out else None, root=0))
    holder = {}
    run_rank(lambda c: holder.setdefault("results", run_job(out, c)), comm)
    if comm.Get_rank() != 0:
        return 0
    timings = Timings.from_json((out / TIMINGS_FILE).read_text())
    return _report(prog, args, Path(args.program).read_text(), out, holder["results"], timings)


def _report(prog, args, text, out, results, timings: Timings) -> int:
    print(f"== ran on {timings.ranks} MPI ranks in {timings.seconds * 1e3:.2f} ms per run (median of "
          f"{timings.repeat}; kernels: {'/'.join(timings.kernel_backends)}, {timings.kernel_cache_misses} compiled "
          f"on the ranks, loading took up to {timings.compile_seconds_max:.2f} s per rank)")
    print("\n".join(timings.text().splitlines()[1:]))
    print(f"== results: {', '.join(str(out / f'result{i}.npy') for i in range(len(results)))}")
    _visualise(prog, args, text, timings)
    if args.check:
        expected = compile_function(text, args.entry)(*_reference_inputs(prog, args))
        expected = expected if isinstance(expected, tuple) else (expected,)
        for i, (e, got) in enumerate(zip(expected, results)):
            if not _same_result(e, got):
                print(f"slicer-run: error: result #{i} differs from the unpartitioned program ({_difference(e, got)})",
                      file=sys.stderr)
                return 1
        print("results match the unpartitioned program")
    return 0


def _visualise(prog, args, text: str, timings: Timings) -> None:
    """--explain's measured memory and timeline, --plot's pictures, --trace's file."""
    g = prog.graph
    if args.explain:
        print("== memory per device, measured: " + prog.memory(timings).measured_text())
        print("== " + timeline_text(timings, mesh=g.mesh))
    if args.trace:
        print(f"== trace (chrome://tracing, ui.perfetto.dev): {write_chrome_trace(timings, args.trace, g.mesh)}")
    if args.plot:
        names = source_names(g, text)
        folder = Path(args.plot)
        for name in g.values:
            value_picture(g, name, text, names=names).png(folder / f"{describe(g, name, names).file_stem}.png")
        timeline_png(timings, folder / "timeline.png", mesh=g.mesh)
        print(f"== pictures: {len(g.values)} values and timeline.png in {folder}")


def _same_result(expected: np.ndarray, got: np.ndarray) -> bool:
    """Integers exactly; floats within a tolerance scaled by the result's magnitude, NaN equal to NaN."""
    if expected.shape != got.shape:
        return False
    if not np.issubdtype(expected.dtype, np.floating):
        return bool(np.array_equal(expected, got))
    finite = np.isfinite(expected)
    scale = max(1.0, float(np.abs(expected[finite]).max())) if finite.any() else 1.0
    return bool(np.allclose(expected, got, rtol=1e-4, atol=1e-5 * scale, equal_nan=True))


def _difference(expected: np.ndarray, got: np.ndarray) -> str:
    if expected.shape != got.shape:
        return f"shape {list(got.shape)} instead of {list(expected.shape)}"
    e, g = expected.astype(np.float64), got.astype(np.float64)
    both = np.isfinite(e) & np.isfinite(g)
    text = f"max |diff| {float(np.max(np.abs(e - g)[both])):.3g}" if both.any() else "no finite values to compare"
    special = ~both & ~((np.isnan(e) & np.isnan(g)) | (e == g))
    return text + (f"; {int(special.sum())} NaN/inf in different places" if special.any() else "")


if __name__ == "__main__":
    sys.exit(main())
