"""Pipeline parallelism on 2 ranks, measured in one run: the bubble fraction, the activations held, and the
step's time next to data parallel and FSDP on the same model (docs/pipeline.md).

    python benchmarks/pipeline.py --json results.json      # GPT, 4 blocks, 2 stages, 8 micro-batches

For GPipe and 1F1B (2 stages cut at the middle block): the bubble fraction measured on the ranks (the last
step's calls: 1 - busy time / (ranks x span)), the schedule's unit-time bubble and the textbook (S-1)/(M+S-1),
the micro-batches each stage holds at its peak (the schedule's) and their bytes (the received activations the
stage keeps), the trained parameter values per stage, and the step's time (the span of the last step's calls).
Next to them, in the same run: the same step with 8 accumulated micro-batches, data parallel and ZeRO-3 over
x=2, timed as `session.step` (median of 3 after a warm-up). The machine is shared: times are noisy; compare
ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "torch"))
import train_step

import slicer
from slicer import strategies as st


def _pipeline_figures(model, loss_fn, batch, schedule: str, microbatches: int, layers: int) -> dict:
    step = slicer.training_step(model, loss_fn, *batch, optimizer=slicer.AdamW(1e-3))
    tactics = st.pipeline(step, "p", split=[f"blocks.{layers // 2}"], microbatches=microbatches, schedule=schedule)
    prog = slicer.compile(step, mesh=slicer.Mesh(p=2), tactics=tactics)
    prog.train([batch] * 3, ranks=2)
    run = prog.schedule.verify()
    calls = [e for _, events in prog.timeline for e in events]
    held = _held_bytes(prog)
    return {"schedule": schedule, "measured_bubble": prog.measured_bubble(), "unit_bubble": run.bubble,
            "textbook_bubble": 1 / (microbatches + 1), "peak_microbatches": list(run.peak),
            "peak_activation_bytes": [p * b for p, b in zip(run.peak, held)],
            "parameters_per_stage": [sum(_size(v, p) for p in v.parameters) for v in prog.stage_programs],
            "step_seconds": max(e[2] for e in calls) - min(e[1] for e in calls),
            "timeline": prog.timeline_text(60).splitlines()}


def _held_bytes(prog) -> list[int]:
    """Bytes of the values each stage receives per micro-batch (what it holds per micro-batch in flight)."""
    sizes = [0, 0]
    for stage in prog.stage_programs:
        for t in stage.received:
            count = 1
            for d in t.shape:
                count *= d
            sizes[stage.index % 2] += count * (8 if "64" in t.dtype else 4)
    return sizes


def _size(stage, name: str) -> int:
    program = stage.update
    value = program.parameters[program.arg_names.index(name) - program.num_inputs]
    return int(value.numel())


def _spmd_seconds(model, loss_fn, batch, strategy: str, microbatches: int) -> float:
    step = slicer.training_step(model, loss_fn, *batch, optimizer=slicer.AdamW(1e-3), microbatches=microbatches)
    tactics = st.data_parallel(step, "x") if strategy == "data" else st.zero(step, "x", stage=3)
    prog = slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=tactics)
    times = []
    with prog.session(ranks=2, timeout=900) as session:
        session.step(*batch)
        for _ in range(3):
            start = time.perf_counter()
            session.step(*batch)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--microbatches", type=int, default=8)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    model, loss_fn, batch = train_step.gpt(n_layer=args.layers, batch=args.batch, seq=16, d_model=64)
    results = {"model": f"GPT {args.layers} blocks, batch {args.batch}, seq 16, d_model 64", "stages": 2,
               "microbatches": args.microbatches, "pipeline": [], "spmd": {}}
    for schedule in ("gpipe", "1f1b"):
        results["pipeline"].append(_pipeline_figures(model, loss_fn, batch, schedule, args.microbatches,
                                                     args.layers))
    for strategy in ("data", "fsdp"):
        results["spmd"][strategy] = {"step_seconds": _spmd_seconds(model, loss_fn, batch, strategy,
                                                                   args.microbatches)}
    text = json.dumps(results, indent=2)
    if args.json:
        Path(args.json).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
