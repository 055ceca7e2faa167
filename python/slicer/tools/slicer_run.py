"""`slicer-run`: partition a program and run it on N MPI ranks (local, or on the hosts `--mpiexec` names).

    slicer-run PROGRAM.mlir --mesh x=2,y=2 [--tactic arg1.1=y ...] [--auto [--memory-budget 2GiB]]
               [-n/--ranks N]
               [--inputs a.npy,b.npy | --random SEED] [-o/--output DIR] [--check] [--entry NAME]
               [--mpiexec PATH|COMMAND] [--repeat N] [--oversubscribe] [--timeout SECONDS]
               [--explain] [--show VALUE ...] [--plot DIR] [--trace FILE]
               [--buckets auto|off|BYTES] [--collective-matmul auto|off|CHUNKS]
               [--collectives auto|mpi|shm] [--overlap on|off]

Details: docs/module-notes.md, `tools/slicer_run.py`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from slicer.api import compile
from slicer.automatic.options import parse_budget
from slicer.automatic_api import auto
from slicer.checking import as_tuple
from slicer.core import dtypes, environment
from slicer.core.compare import difference, same_result
from slicer.core.errors import InputError, RunError, SlicerError
from slicer.core.mesh import Mesh
from slicer.lowering import cache_stats, compile_function
from slicer.runtime import RunOptions, launch
from slicer.runtime.execution.blocks import random_global
from slicer.runtime.execution.executor import overlap_word
from slicer.runtime.execution.timings import Timings
from slicer.runtime.jobs.in_job import check_job, job_comm, run_job_here
from slicer.runtime.jobs.resources import check_memory, check_ranks
from slicer.spmd.bucketing import bucket_setting
from slicer.spmd.chunked_contractions import chunks_setting
from slicer.tactics import parse_tactics
from slicer.viz import timeline_png, timeline_text, value_picture, write_chrome_trace
from slicer.viz.block_picture import load_pyplot
from slicer.viz.value_lookup import describe

from .cli import EXIT_OK, failure, unreadable, usage_error

PROG = "slicer-run"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("program")
    p.add_argument("--mesh", required=True, help="named axes with sizes, major to minor, e.g. x=2,y=2")
    p.add_argument("--tactic", action="append", default=[], help="argI.D=AXES | argI=replicated | resultI.D=AXES")
    p.add_argument("--auto", action="store_true",
                   help="search the tactics (slicer.auto), after any --tactic given, and print them with the reasons")
    p.add_argument("--memory-budget", metavar="BYTES",
                   help="with --auto: peak bytes per device the tactics must fit (e.g. 2GiB, 512MiB, 1000000)")
    p.add_argument("-n", "--ranks", type=int, default=None, help="number of ranks (default: the mesh's device count)")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--inputs", help="comma-separated .npy files, one per argument")
    source.add_argument("--random", type=int, default=None, metavar="SEED", help="random inputs (default seed 0)")
    p.add_argument("-o", "--output", metavar="DIR", help="directory for result<i>.npy (default: a temporary directory)")
    p.add_argument("--check", action="store_true", help="compare with the unpartitioned program; exit 1 if they differ")
    p.add_argument("--entry", help="the function to run (default: the module's single public function)")
    p.add_argument("--mpiexec", help="mpiexec to use: a path, or a command line placing the ranks on several hosts "
                                     "(\"mpiexec -f hosts.txt\"; docs/runtime.md, Several hosts); default: beside "
                                     "this Python, then PATH")
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
    p.add_argument("--buckets", type=_setting, metavar="auto|off|BYTES",
                   help="combine all_reduces of gradients into buckets of this size (slicer.compile(buckets=))")
    p.add_argument("--collective-matmul", type=_setting, metavar="auto|off|CHUNKS",
                   help="split contractions so their collectives overlap (slicer.compile(collective_matmul=))")
    p.add_argument("--collectives", metavar="auto|mpi|shm",
                   help=f"how ranks run collectives (Program.run(collectives=); "
                        f"default: {environment.COLLECTIVES.name})")
    p.add_argument("--overlap", metavar="on|off",
                   help=f"collectives overlap kernels, or each is waited for where it stands (Program.run(overlap=); "
                        f"default: {environment.OVERLAP.name})")
    return p


def _setting(text: str) -> int | str:
    """A rewrite's setting on the command line: a whole number, else the word ("auto", "off")."""
    return int(text) if text.strip().isdigit() else text.strip()


def parse_args(argv):
    return build_parser().parse_args(argv)


@dataclass(frozen=True)
class Request:
    """What the command line asks for, read and checked before the program is compiled."""

    mesh: Mesh
    tactics: tuple
    text: str
    ranks: int
    inputs: list[str] | None
    comm: Any  # the MPI job this process is a rank of (an mpi4py communicator), or None (slicer-run starts one)
    options: RunOptions  # how collectives run (under mpiexec: rank 0's hold on every rank, in_job.settled_options)


def read_command_line(args) -> Request:
    """The mesh, tactics, program text, ranks and input files of the command line; a SlicerError or OSError
    here is a usage error (exit 2)."""
    mesh = Mesh.parse(args.mesh)
    tactics = parse_tactics(";".join(args.tactic))
    if args.buckets is not None:
        bucket_setting(args.buckets)
    if args.collective_matmul is not None:
        chunks_setting(args.collective_matmul)
    if args.memory_budget is not None:
        if not args.auto:
            raise RunError("--memory-budget is a bound for the search: give --auto with it")
        parse_budget(args.memory_budget)
    options = RunOptions.chosen(args.collectives, None if args.overlap is None else overlap_word(args.overlap))
    text = Path(args.program).read_text()
    comm = job_comm()
    if comm is not None:
        check_job(comm, mesh)
    ranks = args.ranks or (comm.Get_size() if comm is not None else mesh.device_count)
    if ranks != mesh.device_count:
        raise RunError(f"the mesh {mesh} has {mesh.device_count} devices; use -n {mesh.device_count}")
    inputs = args.inputs.split(",") if args.inputs else None
    for i, path in enumerate(inputs or ()):
        if not Path(path).is_file():
            raise InputError(f"input file '{path}' (argument #{i}) does not exist")
        try:
            np.load(path, mmap_mode="r")
        except (ValueError, OSError, EOFError) as exc:
            raise InputError(f"input file '{path}' (argument #{i}) is not a readable .npy file ({exc}); write it "
                             "with numpy.save") from None
    return Request(mesh, tactics, text, ranks, inputs, comm, options)


def _reference_inputs(prog, args) -> list[np.ndarray]:
    g = prog.graph
    if args.inputs:
        return [dtypes.from_npy(np.load(path), g.values[name].numpy_dtype)
                for path, name in zip(args.inputs.split(","), g.args)]
    seed = args.random or 0
    return [random_global(seed + i, g.arg_shape(i), g.values[n].numpy_dtype) for i, n in enumerate(g.args)]


def _check_inputs_fit(prog, paths: list[str]) -> None:
    """InputError unless the input files are as many as the arguments, each of the argument's shape and dtype."""
    g = prog.graph
    if len(paths) != len(g.args):
        raise InputError(f"@{g.entry} takes {len(g.args)} inputs, --inputs gives {len(paths)}")
    for i, (path, name) in enumerate(zip(paths, g.args)):
        v = g.values[name]
        header = dtypes.from_npy(np.load(path, mmap_mode="r"), v.numpy_dtype)  # bf16 files hold raw 2-byte voids
        if tuple(header.shape) != g.arg_shape(i) or header.dtype != v.numpy_dtype:
            raise InputError(f"input file '{path}' holds {header.dtype}{list(header.shape)}, but argument #{i} of "
                             f"@{g.entry} is {v.numpy_dtype}{list(g.arg_shape(i))}")


def main(argv: list[str] | None = None) -> int:
    """The console script: exit codes as `slicer.tools.cli` describes (0 ok, 1 failure, 2 usage)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        request = read_command_line(args)
    except OSError as exc:
        return usage_error(parser, unreadable(exc.filename, exc))
    except SlicerError as exc:
        return usage_error(parser, exc)
    try:
        return run(args, request)
    except (SlicerError, OSError) as exc:
        return failure(PROG, exc)


def run(args, request: Request) -> int:
    """Compile, run (on a new job of local ranks, or on the ranks of this job) and report; EXIT_FAILURE when
    `--check` finds a difference."""
    mesh, text, comm = request.mesh, request.text, request.comm
    start = time.perf_counter()
    tactics = request.tactics
    lead = comm is None or comm.Get_rank() == 0
    if args.auto:
        found = auto(text, mesh, memory_budget=args.memory_budget, tactics=tactics, entry=args.entry)
        tactics = found.tactics
        if lead:
            print(f"== slicer.auto chose: {found.text() or '(nothing: everything replicated)'}")
            print(found.explain())
    prog = compile(text, mesh=mesh, tactics=tactics, entry=args.entry, source_name=args.program, buckets=args.buckets,
                   collective_matmul=args.collective_matmul)
    if args.plot:
        load_pyplot()  # no matplotlib: say so before running anything
    if lead:
        print(f"== compiled {args.program} for mesh {mesh} in {time.perf_counter() - start:.2f} s")
        print(prog.explain() if args.explain else prog.explain().split("propagation:")[0].rstrip())
        for what in args.show:
            print(prog.picture(what).text())
    if request.inputs:
        _check_inputs_fit(prog, request.inputs)
    if comm is not None:
        done = run_job_here(prog.graph, comm, inputs=request.inputs, seed=args.random or 0, repeat=args.repeat,
                            collectives=request.options.collectives, overlap=request.options.overlap)
        return EXIT_OK if done is None else _report(prog, args, text, _save(args.output, done[0]), *done)
    if args.mpiexec is None:  # this host's ranks; with an mpiexec of several hosts each rank's host is checked
        check_ranks(request.ranks, args.oversubscribe)
    reference = 0
    if args.check:  # the unpartitioned reference holds the whole arguments and results in this process
        g = prog.graph
        reference = sum(_global_bytes(g, n, g.arg_shape(i)) for i, n in enumerate(g.args)) + \
            sum(_global_bytes(g, n, g.result_shape(i)) for i, n in enumerate(g.results))
    check_memory(prog.graph, request.ranks, extra=reference)
    before = cache_stats().misses
    results, timings = launch(prog.graph, request.ranks, inputs=request.inputs, seed=args.random or 0,
                              repeat=args.repeat, timeout=args.timeout, mpiexec=args.mpiexec,
                              oversubscribe=args.oversubscribe, options=request.options)
    out = _save(args.output, results)
    compiled = cache_stats().misses - before
    print("== kernels: "
          f"{'compiled ' + str(compiled) + ' library' if compiled else 'all from the cache, nothing compiled'}")
    return _report(prog, args, text, out, results, timings)


def _save(output: str | None, results: list[np.ndarray]) -> Path:
    """Write the results as `result<i>.npy` into `output` (a new temporary directory if None); the directory."""
    out = Path(output) if output else Path(tempfile.mkdtemp(prefix="slicer-run-"))
    out.mkdir(parents=True, exist_ok=True)
    for index, array in enumerate(results):
        np.save(out / f"result{index}.npy", array)
    return out


def _global_bytes(graph, name: str, shape) -> int:
    """Bytes of the whole value `name` of logical `shape` (its type's shape may be padded: uneven dims)."""
    return int(np.prod(shape, dtype=np.int64)) * graph.values[name].numpy_dtype.itemsize


def _report(prog, args, text, out, results, timings: Timings) -> int:
    print(f"== ran on {timings.ranks} MPI ranks in {timings.seconds * 1e3:.2f} ms per run (median of "
          f"{timings.repeat}; kernels: {'/'.join(timings.kernel_backends)}, {timings.kernel_cache_misses} compiled "
          f"on the ranks, loading took up to {timings.compile_seconds_max:.2f} s per rank)")
    print("\n".join(timings.text().splitlines()[1:]))
    print(f"== results: {', '.join(str(out / f'result{i}.npy') for i in range(len(results)))}")
    _visualise(prog, args, text, timings)
    if args.check:
        expected = as_tuple(compile_function(text, args.entry)(*_reference_inputs(prog, args)))
        for i, (e, got) in enumerate(zip(expected, results)):
            if not same_result(e, got):
                return failure(PROG, f"result #{i} differs from the unpartitioned program ({difference(e, got)})")
        print("results match the unpartitioned program")
    return EXIT_OK


def _visualise(prog, args, text: str, timings: Timings) -> None:
    """--explain's measured memory and timeline, --plot's pictures, --trace's file."""
    g = prog.graph
    if args.explain:
        print("== memory per device, measured: " + prog.memory(timings).measured_text())
        print("== " + timeline_text(timings, mesh=g.mesh))
    if args.trace:
        print(f"== trace (chrome://tracing, ui.perfetto.dev): {write_chrome_trace(timings, args.trace, g.mesh)}")
    if args.plot:
        names = prog.value_names()
        folder = Path(args.plot)
        for name in g.values:
            value_picture(g, name, text, names=names).png(folder / f"{describe(g, name, names).file_stem}.png")
        timeline_png(timings, folder / "timeline.png", mesh=g.mesh)
        print(f"== pictures: {len(g.values)} values and timeline.png in {folder}")


if __name__ == "__main__":
    sys.exit(main())
