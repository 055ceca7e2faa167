"""The schedule's rewrites measured side by side: the Megatron MLP (end_to_end.py's gelu MLP) on 2 ranks with its
second matmul whole or split into chunks (`slicer-collective-matmul`, `SLICER_COLLECTIVE_MATMUL`), in turn, each
`--reps` timed runs per round; and each variant's timeline (PNG and text) of its last run. With `--training`,
the GPT training step of training.py (data parallel or FSDP on 2 ranks) with its all_reduces bucketed or not
(`slicer-bucket-collectives`, `SLICER_BUCKETS`), each variant's session in turn, and the bucketed step's timeline.

    python benchmarks/overlap.py --rounds 3 --reps 15 --pictures benchmarks/images
    python benchmarks/overlap.py --training data --layers 2 --d-model 256 --rounds 2 --pictures benchmarks/images
    python benchmarks/overlap.py --small --reps 2          # toy sizes (runs)

Times are the runtime's (`Timings.seconds`: median over runs of the slowest rank's wall time).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from end_to_end import mlp_text

import slicer

VARIANTS = {"whole": "off", "chunks2": 2, "chunks4": 4, "auto": "auto"}


def compile_variant(text: str, setting: str | int):
    tactics = [slicer.Tile(arg=1, dim=1, axes="y"), slicer.Tile(arg=3, dim=0, axes="y")]
    return slicer.compile(text, mesh=slicer.Mesh(y=2), tactics=tactics, collective_matmul=setting)


def training(args) -> None:
    """Data parallel (or FSDP) GPT steps with buckets="off" and the cost model's buckets, sessions in turn."""
    from training_common import ADAMW, Sizes, batches, build_model, example_module
    from training_slicer import tactics_for

    sizes = Sizes(n_layer=args.layers, d_model=args.d_model, warmup=1, steps=args.reps)
    data = batches(sizes)
    step = slicer.training_step(build_model(sizes), example_module().loss_fn, *data[0], optimizer=slicer.AdamW(**ADAMW))
    programs = {}
    for name, setting in (("unbucketed", "off"), ("bucketed", "auto")):
        mesh, tactics = tactics_for(step, args.training)
        programs[name] = slicer.compile(step, mesh=mesh, tactics=tactics, buckets=setting)
    times, losses = {name: [] for name in programs}, {}
    for _ in range(args.rounds):
        for name, program in programs.items():
            with program.session(ranks=2) as session:
                run = []
                for i, (idx, targets) in enumerate(data):
                    begin = time.perf_counter()
                    run.append(float(session.step(idx, targets)))
                    if i >= sizes.warmup:
                        times[name].append(time.perf_counter() - begin)
                losses.setdefault(name, run)
    print(f"GPT step {args.training} on 2 ranks, {sizes}; load average {os.getloadavg()[0]:.1f}")
    print("| variant | collectives | median ms | vs unbucketed | losses |\n|---|---|---|---|---|")
    base = statistics.median(times["unbucketed"])
    for name, program in programs.items():
        count = sum(hasattr(n, "step") for n in program.graph.nodes)
        median = statistics.median(times[name])
        print(f"| {name} | {count} | {median * 1e3:.1f} | {base / median:.3f}x | {losses[name]} |")
    if args.pictures:
        from slicer.viz.timeline import timeline_png

        for name, program in programs.items():
            _, timings = program.run(*data[0], ranks=2, repeat=3, return_timings=True)
            print(timeline_png(timings, Path(args.pictures) / f"overlap_{args.training}_{name}.png"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="384,768,3072", help="B,D,H of the MLP")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--pictures", metavar="DIR", help="write each variant's timeline PNG there")
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--small", action="store_true", help="B,D,H = 16,32,64")
    parser.add_argument("--training", choices=("data", "fsdp"), help="the GPT step's gradients, bucketed or not")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--d-model", type=int, default=256)
    args = parser.parse_args()
    if args.training:
        return training(args)
    b, d, h = (16, 32, 64) if args.small else map(int, args.sizes.split(","))
    text = mlp_text(b, d, h, "gelu")
    rng = np.random.default_rng(0)
    arrays = [(rng.standard_normal(s, dtype=np.float32) / np.sqrt(s[0])).astype(np.float32)
              for s in ((b, d), (d, h), (h,), (h, d))]
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
        from slicer.viz.timeline import timeline_png, timeline_text

        for name in names:
            path = timeline_png(last[name], Path(args.pictures) / f"overlap_mlp_{name}.png")
            print(f"{name}: {path}\n{timeline_text(last[name])}")
    if args.json:
        Path(args.json).write_text(json.dumps({"sizes": [b, d, h], "load": load, "times": times}, indent=1))


if __name__ == "__main__":
    main()
