"""Pipeline parallelism on 2 ranks, measured in one run: the bubble fraction, the activations held, and the
step's time next to data parallel and FSDP on the same model (docs/pipeline.md).

    python benchmarks/pipeline.py --json results.json      # GPT, 4 blocks (d 256), 2 stages, 8 micro-batches

For GPipe and 1F1B (2 stages, `stages=2`: cut where the FLOPs balance): the bubble fraction measured on the
ranks (1 - busy time / (ranks x span) of a step, median of 3 steps of one session after a warm-up), the
schedule's unit-time bubble and the textbook (S-1)/(M+S-1), the micro-batches each stage holds at its peak
(the schedule's) and their bytes (`held_bytes`: received and saved activations), each rank's measured resident
peak growth during the steps (VmHWM), the memory report, the trained parameter values per stage, each stage's
busy time (and by forward, backward, update) and the step's time (the span of a step's calls).
`--layers 12 --pipeline-only`: the 12-block rows, without data parallel and FSDP. Besides the wall-clock
figures, each call's CPU seconds: per stage by kind, the slowest stage's CPU time over the mean, and the bubble
the schedule makes with those times (`cpu_bubble`; on a shared machine wall time measures the sharing too).

    python benchmarks/pipeline.py --compile --layers 12     # compile time only (CPU and wall seconds)

With `--compile`: the CPU seconds (this process and its children) of `slicer.compile` under pipeline x data x
Megatron on `Mesh(p=2, d=2, x=2)`, next to data x Megatron on `Mesh(d=2, x=2)` in the same run.
Next to them, in the same run: the same step with 8 accumulated micro-batches, data parallel and ZeRO-3 over
x=2, timed as `session.step` (median of 3 after a warm-up). The machine is shared: times are noisy; compare
ratios within one run.

    python benchmarks/pipeline.py --remat full,save_dots [--schedule gpipe]  # remat on every block, and without

With `--remat`: the schedule (1F1B by default) without remat and with each policy on `blocks.*`, the same
figures, and their ratios to the run without remat (held bytes and resident growth per stage, step time);
nothing else.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "torch"))
import train_step

import slicer
from slicer import strategies as st


def _pipeline_figures(model, loss_fn, batch, schedule: str, microbatches: int, remat: str = "none") -> dict:
    step = slicer.training_step(model, loss_fn, *batch, optimizer=slicer.AdamW(1e-3))
    tactics = st.pipeline(step, "p", stages=2, microbatches=microbatches, schedule=schedule)
    tactics += st.remat(step, "blocks.*", remat) if remat != "none" else []
    start = time.perf_counter()
    prog = slicer.compile(step, mesh=slicer.Mesh(p=2), tactics=tactics)
    compile_seconds = time.perf_counter() - start
    bubbles, cpu_bubbles, spans, busy, cpu = [], [], [], [], []
    with prog.session(ranks=2, timeout=900) as session:  # one job: a warm-up step, then 3 steps measured
        session.step(*batch)
        for _ in range(3):
            session.step(*batch)
            prog.timeline, prog.resident_growth = session.timeline()
            calls = [e for _, events in prog.timeline for e in events]
            bubbles.append(prog.measured_bubble())
            cpu_bubbles.append(prog.cpu_bubble())
            spans.append(max(e[2] for e in calls) - min(e[1] for e in calls))
            busy.append([{kind: sum(e[2] - e[1] for e in events if e[0].startswith(kind))
                          for kind in ("forward", "backward", "update")} for _, events in prog.timeline])
            cpu.append([{kind: sum(e[3] for e in events if e[0].startswith(kind))
                         for kind in ("forward", "backward", "update")} for _, events in prog.timeline])
    run = prog.schedule.verify()
    held = prog.held_bytes()
    return {"schedule": schedule, "remat": remat, "split": list(prog.split), "compile_seconds": compile_seconds,
            "measured_bubble": statistics.median(bubbles), "measured_bubbles": bubbles,
            "cpu_bubble": statistics.median(cpu_bubbles), "cpu_bubbles": cpu_bubbles, "unit_bubble": run.bubble,
            "textbook_bubble": 1 / (microbatches + 1), "peak_microbatches": list(run.peak),
            "held_bytes_per_microbatch": held, "peak_activation_bytes": [p * b for p, b in zip(run.peak, held)],
            "resident_growth_bytes": prog.resident_growth, "memory": prog.memory(),
            "parameters_per_stage": [sum(_size(v, p) for p in v.parameters) for v in prog.stage_programs],
            "stage_busy_seconds": [statistics.median(sum(b[s].values()) for b in busy) for s in range(2)],
            "stage_busy_seconds_by_kind": [{k: statistics.median(b[s][k] for b in busy) for k in busy[0][s]}
                                           for s in range(2)],
            "stage_cpu_seconds_by_kind": [{k: statistics.median(c[s][k] for c in cpu) for k in cpu[0][s]}
                                          for s in range(2)],
            "slowest_stage_cpu_over_mean": statistics.median(max(t) / statistics.mean(t) for t in (
                [sum(c[s].values()) for s in range(2)] for c in cpu)),
            "step_seconds": statistics.median(spans), "timeline": prog.timeline_text(60).splitlines()}


def _cpu_seconds() -> float:
    """CPU seconds of this process and its finished children (torch-mlir's lowerings) so far."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _compile_figures(model, loss_fn, batch, microbatches: int) -> dict:
    """CPU and wall seconds of compiling the step under pipeline x data x Megatron (`Mesh(p=2, d=2, x=2)`: 2
    stages, data parallel over d, the MLPs split over x) and, in the same run, of the same step under data x
    Megatron alone (`Mesh(d=2, x=2)`: one SPMD program)."""
    step = slicer.training_step(model, loss_fn, *batch, optimizer=slicer.AdamW(1e-3))
    mlp = {"column": ["blocks.*.mlp.c_fc.*"], "row": ["blocks.*.mlp.c_proj.weight"]}
    others = st.data_parallel(step, "d") + st.megatron(step, "x", **mlp)
    figures = {}
    for name, mesh, tactics in (
            ("pipeline_data_megatron", slicer.Mesh(p=2, d=2, x=2),
             st.pipeline(step, "p", stages=2, microbatches=microbatches) + others),
            ("data_megatron", slicer.Mesh(d=2, x=2), others)):
        cpu, wall = _cpu_seconds(), time.perf_counter()
        slicer.compile(step, mesh=mesh, tactics=tactics)
        figures[name] = {"cpu_seconds": _cpu_seconds() - cpu, "wall_seconds": time.perf_counter() - wall}
    return figures


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
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--remat", default=None,
                        help="policies (full,save_dots): remat on every block next to the same schedule without, only")
    parser.add_argument("--schedule", default="1f1b", choices=("gpipe", "1f1b"), help="the schedule for --remat")
    parser.add_argument("--json", default=None)
    parser.add_argument("--pipeline-only", action="store_true", help="skip data parallel and FSDP")
    parser.add_argument("--compile", action="store_true",
                        help="only the compile time (CPU) under pipeline x data x Megatron, next to data x Megatron")
    args = parser.parse_args(argv)
    model, loss_fn, batch = train_step.gpt(n_layer=args.layers, batch=args.batch, seq=args.seq,
                                           d_model=args.d_model, vocab=256)
    results = {"model": f"GPT {args.layers} blocks, batch {args.batch}, seq {args.seq}, d_model {args.d_model}, "
                        "vocabulary 256", "stages": 2, "microbatches": args.microbatches, "pipeline": [], "spmd": {}}
    if args.compile:
        results["compile"] = _compile_figures(model, loss_fn, batch, args.microbatches)
    elif args.remat:
        for policy in ("none", *args.remat.split(",")):
            results["pipeline"].append(_pipeline_figures(model, loss_fn, batch, args.schedule, args.microbatches,
                                                         policy))
        plain = results["pipeline"][0]
        results["remat_ratios"] = {r["remat"]: {
            "held_bytes": [a / b for a, b in zip(r["held_bytes_per_microbatch"], plain["held_bytes_per_microbatch"])],
            "resident_growth": [a / b for a, b in zip(r["resident_growth_bytes"], plain["resident_growth_bytes"])],
            "step_seconds": r["step_seconds"] / plain["step_seconds"]} for r in results["pipeline"][1:]}
    for schedule in () if args.remat or args.compile else ("gpipe", "1f1b"):
        results["pipeline"].append(_pipeline_figures(model, loss_fn, batch, schedule, args.microbatches))
    for strategy in () if args.remat or args.pipeline_only or args.compile else ("data", "fsdp"):
        results["spmd"][strategy] = {"step_seconds": _spmd_seconds(model, loss_fn, batch, strategy,
                                                                   args.microbatches)}
    text = json.dumps(results, indent=2)
    if args.json:
        Path(args.json).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
