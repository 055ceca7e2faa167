"""The schedule's rewrites measured side by side: the Megatron MLP (end_to_end.py's gelu MLP) on 2 ranks with its
second matmul whole or split into chunks (`slicer-collective-matmul`, `SLICER_COLLECTIVE_MATMUL`), in turn, each
`--reps` timed runs per round; and each variant's timeline (PNG and text) of its last run.

    python benchmarks/overlap.py --rounds 3 --reps 15 --pictures benchmarks/images
    python benchmarks/overlap.py --small --reps 2          # toy sizes (runs)

Times are the runtime's (`Timings.seconds`: median over runs of the slowest rank's wall time).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from end_to_end import mlp_text  # noqa: E402

import slicer  # noqa: E402
from slicer.spmd.collective_matmul import ENV  # noqa: E402

VARIANTS = {"whole": "0", "chunks2": "2", "chunks4": "4", "auto": "auto"}


def compile_variant(text: str, setting: str):
    os.environ[ENV] = setting
    tactics = [slicer.Tile(arg=1, dim=1, axes="y"), slicer.Tile(arg=3, dim=0, axes="y")]
    return slicer.compile(text, mesh=slicer.Mesh(y=2), tactics=tactics)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="384,768,3072", help="B,D,H of the MLP")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--pictures", metavar="DIR", help="write each variant's timeline PNG there")
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--small", action="store_true", help="B,D,H = 16,32,64")
    args = parser.parse_args()
    b, d, h = (16, 32, 64) if args.small else map(int, args.sizes.split(","))
    text = mlp_text(b, d, h, "gelu")
    rng = np.random.default_rng(0)
    arrays = [(rng.standard_normal(s, dtype=np.float32) / np.sqrt(s[0])).astype(np.float32) for s in ((b, d), (d, h), (h,), (h, d))]
    names = args.variants.split(",")
    programs = {name: compile_variant(text, VARIANTS[name]) for name in names}
    reference, times, last = None, {name: [] for name in names}, {}
    for _ in range(args.rounds):
        for name in names:
            out, timings = programs[name].run(*arrays, ranks=2, repeat=args.reps, return_timings=True)
            reference = out if reference is None else reference
            np.testing.assert_allclose(out, reference, rtol=1e-5, atol=1e-5)
            times[name].append(timings.seconds)
            last[name] = timings
    load = os.getloadavg()[0]
    base = statistics.median(times[names[0]])
    print(f"gelu MLP B={b} D={d} H={h}, Megatron on 2 ranks; median of {args.rounds} rounds x {args.reps} runs; "
          f"load average {load:.1f}")
    print("| variant | collectives | median ms | vs " + names[0] + " |\n|---|---|---|---|")
    for name in names:
        collectives = sum(hasattr(n, "step") for n in programs[name].graph.nodes)
        median = statistics.median(times[name])
        print(f"| {name} | {collectives} | {median * 1e3:.2f} | {base / median:.3f}x |")
    if args.pictures:
        from slicer.viz.timeline import timeline_png, timeline_text  # noqa: PLC0415

        for name in names:
            path = timeline_png(last[name], Path(args.pictures) / f"overlap_mlp_{name}.png")
            print(f"{name}: {path}\n{timeline_text(last[name])}")
    if args.json:
        Path(args.json).write_text(json.dumps({"sizes": [b, d, h], "load": load, "times": times}, indent=1))


if __name__ == "__main__":
    main()
