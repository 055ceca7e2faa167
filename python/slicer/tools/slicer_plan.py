"""``slicer-plan``: synthesise, print and optionally check a redistribution plan; calibrate the cost model.

Example: ``slicer-plan --mesh x=2,y=4 --shape 1024x1024 --src '[[x],[y]]' --dst '[[y],[x]]' [--json] [--check]``.
Types may name sub-axes (``y:(1)2``, the major half of y; see docs/redistribution.md). ``--cost bytes``
minimises the bytes received instead of the estimated time; ``--latency``, ``--bandwidth``,
``--axis-latency x=SECONDS`` and ``--axis-bandwidth x=BYTES_PER_S`` override the time model's figures.
``slicer-plan --calibrate [all|links|kernels] [-n/--ranks 8] [--mesh x=2,y=4] [--mpiexec PATH] [-o/--output FILE]
[--machine-output FILE] [--rounds 3]`` measures this machine's figures and stores them where every plan and search
finds them: the links' latency and bandwidth with the MPI executor on this machine, or on the hosts the given
mpiexec starts ranks on (per axis with ``--mesh``; on several hosts also per link class, across the hosts and
within one, which price any mesh's axes by where their groups lie: `CostModel.for_mesh`), in
``$XDG_CACHE_HOME/slicer/cost_model.json`` (or ``--output``); and the kernels' figures `slicer.auto` prices
programs with (`slicer.automatic.Machine`: probe programs compiled and run on one rank per core, at most
``--ranks``; `slicer.tools.machine_probes`; each probe the median of ``--rounds`` interleaved rounds), in
``machine.json`` beside it (or ``--machine-output``). ``all`` (the default) measures the links first, so the
kernels' fit prices the probes' collectives with them.
Exit codes as every tool (``slicer.tools.cli``): 0 ok; 1 no plan, a failed ``--check`` or calibration run;
2 a bad command line (a flag, mesh, shape, type or cost-model file that cannot be used), with
``slicer-plan: error: <message>`` on stderr (never a traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from slicer.automatic.machine import machine_path
from slicer.core.dtypes import ELEMENT_TYPE_NAMES
from slicer.core.errors import RedistributionError, SlicerError
from slicer.core.mesh import Mesh
from slicer.redistribution import DistType, numpy_dtype, parse_shape, plan, simulate, subaxes
from slicer.redistribution.costs import CostModel, calibration_path
from slicer.runtime.collectives.calibration import model_from
from slicer.runtime.jobs.mpiexec import run_spmd

from .cli import EXIT_FAILURE, EXIT_OK, failure, usage_error
from .machine_probes import calibrate_machine, default_ranks

PROG = "slicer-plan"

CALIBRATIONS = ("all", "links", "kernels")

#: Above this many elements ``--check`` simulates on a smaller array with the same types.
CHECK_LIMIT = 1 << 24


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Plan a memory-bounded redistribution of a distributed array.")
    p.add_argument("--mesh", help="mesh axes in order, e.g. x=2,y=4")
    p.add_argument("--shape", help="global shape, e.g. 1024x1024")
    p.add_argument("--dtype", default="f32", help=f"element type: {', '.join(ELEMENT_TYPE_NAMES)} (default f32)")
    p.add_argument("--src", help="source type, axes major to minor, e.g. '[[x],[y]]', '[[x],[]] partial=[y]' or "
                                 "with sub-axes '[[x,y:(2)2],[y:(1)2]]'")
    p.add_argument("--dst", help="target type, e.g. '[[y],[x]]'")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--check", action="store_true", help="run the whole-mesh simulator; exit 1 on a mismatch")
    p.add_argument("--cost", choices=("time", "bytes"), default="time",
                   help="minimise the estimated time (default) or the bytes received")
    p.add_argument("--no-sub-axes", action="store_true", help="plan with whole axes only")
    p.add_argument("--latency", type=float, help="seconds per communicating step (default: calibrated)")
    p.add_argument("--bandwidth", type=float, help="bytes per second and device (default: calibrated)")
    p.add_argument("--axis-latency", action="append", default=[], metavar="AXIS=SECONDS",
                   help="latency of the links of one axis (repeatable)")
    p.add_argument("--axis-bandwidth", action="append", default=[], metavar="AXIS=BYTES_PER_S",
                   help="bandwidth of the links of one axis (repeatable)")
    p.add_argument("--cost-model", help="read the figures from this JSON file instead")
    p.add_argument("--calibrate", nargs="?", const="all", choices=CALIBRATIONS,
                   help="measure this machine's figures and store them: the links' latency and bandwidth (links), "
                        "the kernels' figures slicer.auto uses (kernels), or both (all, the default; see --ranks, "
                        "--output)")
    p.add_argument("-n", "--ranks", type=int, default=8, help="MPI ranks for --calibrate (default 8)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="where --calibrate stores the links' figures (default: the user cache)")
    p.add_argument("--machine-output", metavar="FILE",
                   help="where --calibrate stores the kernels' figures (default: machine.json in the user cache)")
    p.add_argument("--rounds", type=int, default=3,
                   help="--calibrate kernels: interleaved rounds of the probes, the median counts (default 3; 1 is "
                        "three times as fast and follows the machine's load more)")
    p.add_argument("--mpiexec", help="mpiexec for --calibrate (default: beside this Python, then PATH); a wrapper "
                                     "that starts ranks on several hosts calibrates the links between them")
    return p


def _pairs(items: list[str], what: str) -> tuple[tuple[str, float], ...]:
    """`--axis-latency`/`--axis-bandwidth` values `AXIS=NUMBER` as sorted (axis, number) pairs."""
    out = []
    for item in items:
        name, sep, value = item.partition("=")
        number = _number(value) if sep else None
        if number is None:
            raise RedistributionError(f"--axis-{what} '{item}': write AXIS=NUMBER, e.g. x=1e9")
        out.append((name.strip(), number))
    return tuple(sorted(out))


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def cost_model(args) -> CostModel:
    """The cost model the arguments describe: a file or the default (calibrated or built-in figures), with
    the objective and overrides given."""
    base = CostModel.load(args.cost_model) if args.cost_model else CostModel.default()
    latency = args.latency if args.latency is not None else base.latency
    bandwidth = args.bandwidth if args.bandwidth is not None else base.bandwidth
    axis_latency = dict(base.axis_latency) | dict(_pairs(args.axis_latency, "latency"))
    axis_bandwidth = dict(base.axis_bandwidth) | dict(_pairs(args.axis_bandwidth, "bandwidth"))
    overridden = any(v is not None for v in (args.latency, args.bandwidth)) or args.axis_latency or args.axis_bandwidth
    return CostModel(args.cost, latency, bandwidth, tuple(sorted(axis_latency.items())),
                     tuple(sorted(axis_bandwidth.items())),
                     source=base.source + (" + command line" if overridden else ""))


def _check_shape(shape: tuple[int, ...], mesh: Mesh, src: DistType, dst: DistType) -> tuple[int, ...]:
    """The shape to simulate: the real one, or the smallest multiple of the tile counts if it is huge."""
    if int(np.prod(shape, dtype=np.int64)) <= CHECK_LIMIT:
        return shape
    out = []
    for size, a, b in zip(shape, src.dims, dst.dims):
        ka, kb = subaxes.group_size(mesh, a), subaxes.group_size(mesh, b)
        out.append(min(size, ka * kb // int(np.gcd(ka, kb))))
    return tuple(out)


def calibration_mesh(args) -> Mesh | None:
    """The mesh ``--calibrate`` measures on (None: the ranks in a row); RedistributionError if the command
    line does not fit (a usage error)."""
    if args.ranks < 2:
        raise RedistributionError(f"--ranks {args.ranks}: calibrating needs at least 2 ranks")
    if args.rounds < 1:
        raise RedistributionError(f"--rounds {args.rounds}: give 1 or more rounds of the probes")
    if not args.mesh:
        return None
    mesh = Mesh.parse(args.mesh)
    if mesh.device_count != args.ranks:
        raise RedistributionError(f"--mesh {mesh} has {mesh.device_count} devices but --ranks is {args.ranks}")
    return mesh


def calibrate(args, mesh: Mesh | None) -> int:
    """``--calibrate``: the links' figures, then the kernels', as asked (see the module docstring)."""
    if args.calibrate in ("all", "links"):
        calibrate_links(args, mesh)
    if args.calibrate in ("all", "kernels"):
        calibrate_kernels(args)
    return EXIT_OK


def calibrate_kernels(args) -> None:
    """The kernels' figures: the probes run on one rank per core (at most ``--ranks``), fitted, stored, printed
    with each probe's measured time and the fitted figures' error on it."""
    ranks = max(1, min(args.ranks, default_ranks()))
    path = Path(args.machine_output) if args.machine_output else machine_path()
    machine, measured, errors = calibrate_machine(ranks, rounds=args.rounds, mpiexec=args.mpiexec,
                                                  source=f"calibrated on {ranks} rank(s), {path}")
    machine.save(path)
    for found, error in zip(measured, errors):
        print(f"  {found.probe.name}: {found.seconds * 1e3:.3f} ms measured, {error:+.0%} fitted")
    print(f"kernels: {machine}")
    print(f"stored in {path}")


def calibrate_links(args, mesh: Mesh | None) -> None:
    """The links' figures: the measurement on ``--ranks`` ranks, fitted, stored, printed."""
    argv = [sys.executable, "-m", "slicer.runtime.collectives.calibration"]
    if mesh is not None:
        argv += ["--mesh", str(mesh)]
    done = run_spmd(args.ranks, argv, mpiexec=args.mpiexec, timeout=900)
    if done.returncode != 0:
        raise RedistributionError(f"the calibration run on {args.ranks} ranks failed (exit {done.returncode}):\n"
                                  f"{done.stderr.strip()[-2000:]}")
    try:
        measured = json.loads(done.stdout.strip().splitlines()[-1])
        samples = measured["samples"]
    except (IndexError, ValueError, KeyError):
        raise RedistributionError(f"the calibration run printed no measurements:\n{done.stdout[-2000:]}") from None
    path = Path(args.output) if args.output else calibration_path()
    model = model_from(samples, "ranks", f"calibrated on {args.ranks} ranks, {path}", measured.get("ranks_per_host", 0))
    model.save(path)
    print(f"cost model: {model}")
    print(f"stored in {path}")


def read_command_line(args) -> tuple[Mesh, tuple[int, ...], DistType, DistType, CostModel]:
    """The mesh, shape, types and cost model the flags give; a SlicerError here is a usage error (exit 2)."""
    mesh = Mesh.parse(args.mesh)
    shape = parse_shape(args.shape)
    numpy_dtype(args.dtype)
    src = DistType.parse(args.src, shape, mesh)
    dst = DistType.parse(args.dst, shape, mesh)
    return mesh, shape, src, dst, cost_model(args)


def check(args, result, mesh: Mesh, shape, src: DistType, dst: DistType, model: CostModel) -> int:
    """``--check``: simulate the plan (at a smaller shape with the same types if it is huge)."""
    small = _check_shape(shape, mesh, src, dst)
    checked = result if small == shape else plan(
        mesh, DistType.of(mesh, small, src.dims, src.partial), DistType.of(mesh, small, dst.dims, dst.partial),
        dtype=args.dtype, cost=model, sub_axes=not args.no_sub_axes)
    try:
        simulate(checked)
    except RedistributionError as exc:
        print(f"{PROG}: check failed: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    note = "" if small == shape else f" (simulated at shape {'x'.join(map(str, small))})"
    print(f"check: ok, every device holds its target block{note}", file=sys.stderr if args.json else sys.stdout)
    return EXIT_OK


def main(argv=None) -> int:
    """The console script: exit codes as `slicer.tools.cli` describes (0 ok, 1 failure, 2 usage)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.calibrate:
        try:
            mesh = calibration_mesh(args)
        except SlicerError as exc:
            return usage_error(parser, exc)
        try:
            return calibrate(args, mesh)
        except SlicerError as exc:
            return failure(PROG, exc)
    missing = [f"--{k}" for k in ("mesh", "shape", "src", "dst") if getattr(args, k) is None]
    if missing:
        return usage_error(parser, f"the following arguments are required: {', '.join(missing)}")
    try:
        mesh, shape, src, dst, model = read_command_line(args)
    except SlicerError as exc:
        return usage_error(parser, exc)
    try:
        result = plan(mesh, src, dst, dtype=args.dtype, cost=model, sub_axes=not args.no_sub_axes)
    except SlicerError as exc:
        return failure(PROG, exc)
    print(result.to_json() if args.json else result)
    return check(args, result, mesh, shape, src, dst, model) if args.check else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
