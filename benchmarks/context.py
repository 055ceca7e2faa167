"""Context parallelism (`slicer.strategies.context_parallel`) against today's sequence tiling, on 2 devices, all
in one run: the ring load-balanced, as the strategy compiles it, the plain ring beside it, and all_to_all by heads
(Ulysses, `method="all_to_all"`):

    python benchmarks/context.py --json context.json            # memory at S=8192, step time at S=2048
    python benchmarks/context.py --memory-seq 2048 --time-seq 512 --repeat 3

The model is a one-block nanoGPT (examples/torch/idioms.py: causal `F.scaled_dot_product_attention`, D=512,
8 heads, vocabulary 64), batch 1, an SGD step. Sequence tiling is `Tile(idx, 1)`, `Tile(targets, 1)` over x=2:
every op between attention blocks on its own tokens, K and V gathered whole for attention. Context parallelism
adds the ring: each device keeps its queries, K and V blocks move around the axis by permutes. Ulysses: q, k, v
move from sequence-tiled to head-tiled by all_to_all, each device computes attention over the whole sequence for
its heads, and the output moves back.

- memory: the planned peak per device (`prog.memory()`, the kernel graph's liveness) at `--memory-seq`, both
  strategies and one device; the target is ring <= 0.6x sequence tiling. Planned, not run.
- time: `--repeat` timed runs of the step on 2 MPI ranks at `--time-seq` (median of the slowest rank), both
  strategies; the target is ring >= 0.9x the speed of sequence tiling (time ratio <= 1/0.9). Each rank's busy
  time in kernels (its timeline's kernel events): the slowest within 10% of the fastest. The losses of both
  runs must agree (1e-5 relative). `--timeline PATH`: the ring's timeline of that run as a PNG (and as
  text), and Ulysses' beside it (`PATH` with `-all_to_all` before the suffix).
- work: the FLOPs each device's kernels compute in one step (contractions and the rest, counted from the
  compiled kernels as `slicer.auto` prices them; the same on every device of an SPMD program), which a loaded
  machine does not change: the balanced ring skips the [c, c] products the causal mask hides whole.

Timings on a shared 2-core machine are noisy: compare ratios within a run, repeat and take medians.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "torch"))
import idioms

import slicer
from slicer import strategies as st
from slicer.automatic.sketch import read_kernels
from slicer.frontends.context_import import import_in_blocks
from slicer.viz.timeline import timeline_png, timeline_text

MIB = 2 ** 20


def step_of(seq: int):
    """A one-block causal nanoGPT step at sequence length `seq` (batch 1) and its batch."""
    torch.manual_seed(0)
    model = idioms.NanoGPT(vocab=64, seq=seq, d_model=512, n_head=8, flavors=("causal",))
    tokens = torch.randint(0, 64, (1, seq + 1))
    idx, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def loss_fn(m, idx, targets):
        return torch.nn.functional.cross_entropy(m(idx).flatten(0, 1), targets.flatten())

    step = slicer.training_step(model, loss_fn, idx, targets, optimizer=slicer.SGD(0.01))
    return step, (idx.numpy(), targets.numpy())


def compiled(step, names=("one_device", "sequence", "ring", "plain_ring", "all_to_all")) -> dict:
    """The step on one device, under sequence tiling, under context parallelism (x=2), as the plain ring (its
    attention in blocks of the sequence in its own order: not load-balanced) and by heads (Ulysses)."""
    sequence = [slicer.Tile(arg="idx", dim=1, axes="x"), slicer.Tile(arg="targets", dim=1, axes="x")]
    out = {}
    for name, program, mesh, tactics in (
            ("one_device", lambda: step, slicer.Mesh(x=1), []), ("sequence", lambda: step, slicer.Mesh(x=2), sequence),
            ("ring", lambda: step, slicer.Mesh(x=2), st.context_parallel(step, "x")),
            ("plain_ring", lambda: import_in_blocks(step, 2), slicer.Mesh(x=2), sequence),
            ("all_to_all", lambda: step, slicer.Mesh(x=2), st.context_parallel(step, "x", method="all_to_all"))):
        if name in names:
            start = time.perf_counter()
            out[name] = slicer.compile(program(), mesh=mesh, tactics=tactics)
            print(f"  compiled {name} in {time.perf_counter() - start:.1f} s", flush=True)
    return out


def work(prog) -> dict:
    """GFLOP one device's kernels compute in a step: contractions, the rest (module docstring)."""
    sketches = read_kernels(prog.graph.kernels_mlir)
    flops = {"contraction_gflop": 0.0, "other_gflop": 0.0}
    for node in prog.graph.nodes:
        for op in sketches[node.name].ops if hasattr(node, "inputs") else ():
            flops["contraction_gflop" if op.contraction else "other_gflop"] += op.flops / 1e9
    return flops


def memory(seq: int) -> dict:
    step, _ = step_of(seq)
    progs = compiled(step, ("one_device", "sequence", "ring", "all_to_all"))
    peaks = {name: prog.memory().peak for name, prog in progs.items()}
    return {"seq": seq, "peak_mib": {n: p / MIB for n, p in peaks.items()},
            "ring_over_sequence": peaks["ring"] / peaks["sequence"], "target": "<= 0.6",
            "all_to_all_over_sequence": peaks["all_to_all"] / peaks["sequence"]}


def kernel_busy(timings) -> list[float]:
    """Each rank's seconds in kernels (its timeline of the last run)."""
    return [sum(e.end - e.start for e in events if e.kind == "kernel") for events in timings.events]


def step_time(seq: int, repeat: int, picture: str | None = None) -> dict:
    step, batch = step_of(seq)
    progs = compiled(step, ("sequence", "ring", "plain_ring", "all_to_all"))
    out: dict = {"seq": seq, "repeat": repeat}
    losses = {}
    for name in ("sequence", "ring", "plain_ring", "all_to_all"):
        results, timings = progs[name].run(*batch, ranks=2, repeat=repeat, return_timings=True, timeout=3600)
        busy = kernel_busy(timings)
        losses[name] = float(np.asarray(results[0]))
        out[name] = {"step_s": timings.seconds, "kernel_busy_s": busy, "slowest_over_fastest": max(busy) / min(busy),
                     "work_per_device": work(progs[name])}
        if picture and name in ("ring", "all_to_all"):
            path = picture if name == "ring" else str(Path(picture).with_stem(f"{Path(picture).stem}-{name}"))
            print(timeline_text(timings, mesh=progs[name].mesh), flush=True)
            timeline_png(timings, path, mesh=progs[name].mesh)
        print(f"  {name}: {timings.seconds:.3f} s per step, kernels per rank {[round(b, 3) for b in busy]}", flush=True)
    out["ring_time_over_sequence"] = out["ring"]["step_s"] / out["sequence"]["step_s"]
    out["plain_ring_time_over_sequence"] = out["plain_ring"]["step_s"] / out["sequence"]["step_s"]
    out["all_to_all_time_over_sequence"] = out["all_to_all"]["step_s"] / out["sequence"]["step_s"]
    out["target"] = "ring time <= sequence / 0.9; slowest device <= 1.1x fastest"
    out["losses"] = losses
    for name in ("ring", "plain_ring", "all_to_all"):
        assert abs(losses[name] - losses["sequence"]) <= 1e-5 * abs(losses["sequence"]), losses
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memory-seq", type=int, default=8192)
    parser.add_argument("--time-seq", type=int, default=2048)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", default=None)
    parser.add_argument("--timeline", default=None, help="write the ring's timeline (PNG) of the timed run here")
    args = parser.parse_args(argv)
    report = {}
    if args.memory_seq:
        print(f"memory, S={args.memory_seq}:", flush=True)
        report["memory"] = memory(args.memory_seq)
        print(json.dumps(report["memory"], indent=1), flush=True)
    if args.time_seq:
        print(f"step time, S={args.time_seq}, 2 ranks:", flush=True)
        report["time"] = step_time(args.time_seq, args.repeat, args.timeline)
        print(json.dumps(report["time"], indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
