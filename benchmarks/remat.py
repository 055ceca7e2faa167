"""Rematerialisation: activation memory and step time of a GPT training step on 2 MPI ranks with remat policies
none, full and save_dots on every block (`slicer.strategies.remat(step, "blocks.*", policy)`), all in one run.

    python benchmarks/remat.py --json remat.json                       # 12 blocks, data parallel on x=2
    python benchmarks/remat.py --strategy megatron --layers 4 --seq 128
    python benchmarks/remat.py --auto-budget 100 --json remat-auto.json    # slicer.auto under 100 MiB too

The model is examples/training/model.py's GPT (SGD with momentum), imported once. Per policy: the planned peak
per device (`prog.memory()`, kernel-graph liveness) and its part beyond the arguments ("activations and
gradients"), the planned activations saved and recomputed (`prog.memory().remat`), the median wall time of a
step in a session (after warm-up), and each rank's VmHWM (/proc, read before the session closes). The targets
compare each policy with `none` in the same run: the activation peak ratio, the step time ratio, and the planned
peak difference against the measured VmHWM difference (both with remat and without). Every policy's losses
must be the same bits as `none`'s. With `--auto-budget MIB`: `slicer.auto(step, mesh, memory_budget=...)` too,
its plan measured in the same run, against the fastest hand-written plan (the strategy with each policy) whose
planned peak fits the budget. Timings on a shared 2-core machine are noisy: compare ratios within a run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from training_common import Sizes, batches, build_model, loss_function, megatron_split
from training_slicer import rank_memory

import slicer
from slicer import strategies as st

POLICIES = ("none", "full", "save_dots")
MIB = 2 ** 20


def tactics_for(step, strategy: str, sizes: Sizes):
    if strategy == "data":
        return slicer.Mesh(x=2), st.data_parallel(step, "x")
    return slicer.Mesh(y=2), st.megatron(step, "y", **megatron_split(sizes))


def measure(step, mesh, tactics, policy: str, data, warmup: int) -> dict:
    """Compile with `policy` on every block (or, for "auto", `tactics` as `slicer.auto` gave them), plan, run
    the batches in a session on 2 ranks."""
    start = time.perf_counter()
    extra = st.remat(step, "blocks.*", policy) if policy not in ("none", "auto") else []
    prog = slicer.compile(step, mesh=mesh, tactics=tactics + extra)
    compiled = time.perf_counter() - start
    memory = prog.memory()
    times, losses = [], []
    with prog.session(ranks=2, timeout=1800) as session:
        for idx, targets in data:
            begin = time.perf_counter()
            losses.append(float(session.step(idx, targets)))
            times.append(time.perf_counter() - begin)
        vmhwm = [peak for peak, _ in rank_memory(session.job.process.pid)]
    out = {"policy": policy, "compile_s": compiled, "planned_peak_bytes": memory.peak,
           "planned_activation_bytes": memory.peak - memory.argument_bytes, "argument_bytes": memory.argument_bytes,
           "step_s": statistics.median(times[warmup:]), "times": times[warmup:], "losses": losses,
           "vmhwm_mib": vmhwm}
    if memory.remat is not None:
        out.update(saved_bytes=memory.remat.saved, recomputed_bytes=memory.remat.recomputed,
                   planned_peak_without_bytes=memory.remat.peak_without)
    return out


def compare(results: dict) -> dict:
    """Each policy against `none`: activation peak and step time ratios, planned vs measured peak difference."""
    base = results["none"]
    out = {}
    for policy, r in results.items():
        if policy in ("none", "auto"):
            continue
        planned = (base["planned_peak_bytes"] - r["planned_peak_bytes"]) / MIB
        measured = [b - m for b, m in zip(base["vmhwm_mib"], r["vmhwm_mib"], strict=True)]
        out[policy] = {
            "activation_ratio": r["planned_activation_bytes"] / base["planned_activation_bytes"],
            "step_time_ratio": r["step_s"] / base["step_s"],
            "planned_drop_mib": planned, "measured_drop_mib": measured,
            "drop_error": [abs(m - planned) / planned if planned else None for m in measured],
            "same_losses": r["losses"] == base["losses"],
        }
    return out


def measure_auto(step, mesh, budget: int, data, warmup: int) -> dict:
    """`slicer.auto` under `budget`: its search, then its plan measured like the hand-written ones."""
    start = time.perf_counter()
    found = slicer.auto(step, mesh, memory_budget=budget)
    searched = time.perf_counter() - start
    out = measure(step, mesh, list(found.tactics), "auto", data, warmup)
    out.update(tactics=found.text(), search_s=searched, explain=found.explain())
    print(f"auto: {found.text()} in {searched:.0f} s", file=sys.stderr)
    return out


def auto_vs_hand(results: dict, budget: int) -> dict:
    """auto's measured step time against the fastest hand-written plan whose planned peak fits `budget`."""
    hand = {p: r for p, r in results.items() if p != "auto" and r["planned_peak_bytes"] <= budget}
    if not hand or "auto" not in results:
        return {"fitting_hand_written": sorted(hand)}
    best = min(hand, key=lambda p: hand[p]["step_s"])
    return {"fitting_hand_written": sorted(hand), "best_hand_written": best,
            "auto_tactics": results["auto"]["tactics"], "auto_peak_bytes": results["auto"]["planned_peak_bytes"],
            "time_ratio": results["auto"]["step_s"] / hand[best]["step_s"]}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", choices=("data", "megatron"), default="data")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--auto-budget", type=float, help="also slicer.auto under this budget (MiB per device)")
    parser.add_argument("--json", help="write the results here (default: stdout)")
    args = parser.parse_args(argv)
    sizes = Sizes(n_layer=args.layers, d_model=args.d_model, n_head=args.heads, seq=args.seq, batch=args.batch,
                  vocab=args.vocab, warmup=args.warmup, steps=args.steps)
    data = batches(sizes)
    optimizer = slicer.SGD(0.01, momentum=0.9)
    step = slicer.training_step(build_model(sizes), loss_function(sizes), *data[0], optimizer=optimizer)
    mesh, tactics = tactics_for(step, args.strategy, sizes)
    results = {}
    for policy in args.policies.split(","):
        results[policy] = measure(step, mesh, tactics, policy, data, args.warmup)
        r = results[policy]
        print(f"{policy}: planned peak {r['planned_peak_bytes'] / MIB:.1f} MiB (activations "
              f"{r['planned_activation_bytes'] / MIB:.1f} MiB), step {r['step_s'] * 1e3:.0f} ms, VmHWM "
              f"{', '.join(f'{m:.0f}' for m in r['vmhwm_mib'])} MiB", file=sys.stderr)
    if args.auto_budget:
        results["auto"] = measure_auto(step, mesh, int(args.auto_budget * MIB), data, args.warmup)
    report = {"sizes": json.loads(sizes.to_json()), "strategy": args.strategy, "results": results,
              "vs_none": compare(results) if "none" in results else {},
              "auto_vs_hand": auto_vs_hand(results, int(args.auto_budget * MIB)) if args.auto_budget else {}}
    text = json.dumps(report, indent=1)
    if args.json:
        Path(args.json).write_text(text)
    else:
        print(text)
    for policy, c in report["vs_none"].items():
        print(f"{policy} vs none: activations {c['activation_ratio']:.2f}x, step time {c['step_time_ratio']:.2f}x, "
              f"peak drop planned {c['planned_drop_mib']:.1f} MiB, measured "
              f"{', '.join(f'{m:.1f}' for m in c['measured_drop_mib'])} MiB, same losses {c['same_losses']}",
              file=sys.stderr)
    if report["auto_vs_hand"].get("best_hand_written"):
        a = report["auto_vs_hand"]
        print(f"auto ({a['auto_tactics']}) vs {a['best_hand_written']}: step time {a['time_ratio']:.2f}x",
              file=sys.stderr)


if __name__ == "__main__":
    main()
