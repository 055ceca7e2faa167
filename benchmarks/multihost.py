"""One all_reduce (1 MiB of f32: a matmul whose contraction dim is split, its result replicated), or one all_gather
(its rows split, 1 MiB gathered), on the two namespace hosts of test/mpi/namespace_hosts.py (root: network
namespaces; 1 Gbit/s TCP between the hosts), ranks 0-1 on host a and 2-3 on host b, mesh x=2,y=2: over y (within
each host, shared memory), over x (across the hosts, MPI), and over both (two members on each host: in two levels,
`runtime/collectives/host_collectives.py`, and flat, `SLICER_COLLECTIVES=mpi`). For each: the result checked against
numpy, the runtime's timings (median of `--repeat` runs of the slowest rank), the collective's transfer, the bytes
host a sent over the veth pair per run, and the last runs' timelines in one PNG on one time axis (docs/runtime.md);
with `--rounds`, the variants in turn and each figure's median over the rounds.

    sudo .venv/bin/python benchmarks/multihost.py --variants within,across --pictures docs/images
    sudo .venv/bin/python benchmarks/multihost.py --rounds 3 --json /tmp/multihost.json

Timings on a loaded 2-core machine are noisy: compare the variants of one run, not runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "test" / "mpi"))
import namespace_hosts

import slicer
from slicer.core import environment
from slicer.viz import timelines_png

M, K, N = 64, 256, 4096
TEXT = f"""
func.func @main(%a: tensor<{M}x{K}xf32>, %b: tensor<{K}x{N}xf32>) -> tensor<{M}x{N}xf32> {{
  %z = tensor.empty() : tensor<{M}x{N}xf32>
  %c0 = arith.constant 0.0 : f32
  %f = linalg.fill ins(%c0 : f32) outs(%z : tensor<{M}x{N}xf32>) -> tensor<{M}x{N}xf32>
  %r = linalg.matmul ins(%a, %b : tensor<{M}x{K}xf32>, tensor<{K}x{N}xf32>)
                     outs(%f : tensor<{M}x{N}xf32>) -> tensor<{M}x{N}xf32>
  return %r : tensor<{M}x{N}xf32>
}}
"""
# name -> (the collective, the axes it runs over, SLICER_COLLECTIVES)
VARIANTS = {"within": ("all_reduce", "y", "auto"), "across": ("all_reduce", "x", "auto"),
            "both-two-levels": ("all_reduce", ("x", "y"), "auto"), "both-flat": ("all_reduce", ("x", "y"), "mpi"),
            "gather-two-levels": ("all_gather", ("x", "y"), "auto"), "gather-flat": ("all_gather", ("x", "y"), "mpi")}
TITLES = {"within": "all_reduce over y, within each host", "across": "all_reduce over x, across the hosts",
          "both-two-levels": "all_reduce over x,y in two levels", "both-flat": "all_reduce over x,y flat (MPI)",
          "gather-two-levels": "all_gather over x,y in two levels", "gather-flat": "all_gather over x,y flat (MPI)"}


MEASURED = ("run_ms", "transfer_ms", "veth_bytes_per_run")


def tactics(collective: str, axes) -> list:
    """The matmul's contraction dim split (its result a partial sum: all_reduce), or its rows (all_gather)."""
    if collective == "all_reduce":
        return [slicer.Tile(arg=0, dim=1, axes=axes), slicer.Tile(arg=1, dim=0, axes=axes), slicer.Replicate(result=0)]
    return [slicer.Tile(arg=0, dim=0, axes=axes), slicer.Replicate(result=0)]


def run_variant(hosts, name: str, a: np.ndarray, b: np.ndarray, repeat: int):
    collective, axes, strategy = VARIANTS[name]
    prog = slicer.compile(TEXT, mesh=slicer.Mesh(x=2, y=2), tactics=tactics(collective, axes))
    os.environ[environment.COLLECTIVES.name] = strategy  # the ranks inherit mpiexec's environment
    try:
        sent = []
        for count in (1, repeat):  # the difference: the runs' bytes alone (not the blocks, libraries, results)
            before = hosts.bytes_sent()
            got, timings = prog.run(a, b, ranks=4, mpiexec=str(hosts.mpiexec), repeat=count, return_timings=True,
                                    timeout=300)
            sent.append(hosts.bytes_sent() - before)
    finally:
        os.environ.pop(environment.COLLECTIVES.name, None)
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)
    [step] = [s for s in timings.steps if s.label.startswith(collective)]
    figures = {"collective": collective, "axes": list(axes) if isinstance(axes, tuple) else [axes],
               "strategy": strategy, "run_ms": timings.seconds * 1e3, "transfer_ms": step.transfer * 1e3,
               "veth_bytes_per_run": (sent[1] - sent[0]) / (2 * (repeat - 1))}  # each timed run, and with barriers
    return figures, timings, prog


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10, help="at least 2")
    parser.add_argument("--rounds", type=int, default=1, help="the variants in turn this many times (medians)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"some of {','.join(VARIANTS)}")
    parser.add_argument("--pictures", metavar="DIR", help="write the timelines there (--picture-name)")
    parser.add_argument("--picture-name", default="multihost-allreduce.png")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
    results: dict[str, list] = {}
    runs = {}
    with namespace_hosts.two_hosts() as hosts:
        if not hosts.shaped:
            print("note: no token-bucket qdisc (tc tbf): the veth pair runs at memory speed", file=sys.stderr)
        for _ in range(args.rounds):  # the variants in turn, round after round: the load hits them alike
            for name in args.variants.split(","):
                figures, runs[TITLES[name]], prog = run_variant(hosts, name, a, b, args.repeat)
                results.setdefault(name, []).append(figures)
                print(name, json.dumps(figures), flush=True)
    medians = {name: {key: statistics.median(f[key] for f in rounds) for key in MEASURED}
               for name, rounds in results.items()}
    for name, figures in medians.items():
        print(f"{name:18s} " + "  ".join(f"{key} {value:.1f}" for key, value in figures.items()))
    if args.pictures:
        print(timelines_png(runs, Path(args.pictures) / args.picture_name, mesh=prog.mesh))
    if args.json:
        Path(args.json).write_text(json.dumps({"bytes": M * N * 4, "repeat": args.repeat, "medians": medians,
                                               "rounds": results}, indent=1))


if __name__ == "__main__":
    main()
