"""Mixture-of-experts training step on 2 ranks (issue 51): the GShard/Switch MoE of examples/torch/switch_moe.py
(8 experts, top-2, capacity factor 1.25, D=512, F=2048, AdamW) under expert parallel x data (dp2ep: experts and
groups tiled over the same axis, tokens moved by all_to_all), under data parallel with replicated experts, and in
torch eager with 2 threads, in the same run from the same parameters on the same batch.

    python benchmarks/moe.py                       # 4 groups of 256 tokens, 5 timed steps after 2 warm-up steps
    python benchmarks/moe.py --json moe.json --groups 8 --seq 128 --steps 10

Per contender: the median and min wall time of the timed steps (the Slicer steps in a `Program.session` on 2
MPI ranks, timed in the driver), tokens/s, and the loss of step 1; the run fails (exit 1) when a contender's
step-1 loss differs from torch's by more than 1e-4 relative. Also: each Slicer program's collectives (by kind)
and its expert bytes per device. The machine is shared: timings are noisy, compare ratios of one run.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "torch"))

import torch  # noqa: E402
from switch_moe import switch_moe  # noqa: E402
from train_step import torch_optimizer  # noqa: E402

import slicer  # noqa: E402
from slicer import strategies as st  # noqa: E402

RTOL = 1e-4


def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=4, help="sequences (GShard groups) per batch; even")
    parser.add_argument("--seq", type=int, default=256, help="tokens per group")
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--experts", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--json", help="write the results to this file")
    return parser.parse_args(argv)


def torch_times(model, loss_fn, batch, optimizer, warmup: int, steps: int) -> tuple[list[float], float]:
    """(wall time of each timed step, loss of step 1) of torch eager on 2 threads, on a copy of `model`."""
    torch.set_num_threads(2)
    model = copy.deepcopy(model)
    opt = torch_optimizer(optimizer, list(model.parameters()))
    times, first = [], None
    for i in range(warmup + steps):
        start = time.perf_counter()
        opt.zero_grad()
        loss = loss_fn(model, *batch)
        loss.backward()
        opt.step()
        elapsed = time.perf_counter() - start
        first = loss.item() if first is None else first
        if i >= warmup:
            times.append(elapsed)
    return times, first


def slicer_times(prog, batch, warmup: int, steps: int) -> tuple[list[float], float]:
    """(wall time of each timed step, loss of step 1) of `prog` in a session on 2 MPI ranks."""
    times, first = [], None
    with prog.session(ranks=2, timeout=1800) as session:
        for i in range(warmup + steps):
            start = time.perf_counter()
            loss = float(session.step(*batch))
            elapsed = time.perf_counter() - start
            first = loss if first is None else first
            if i >= warmup:
                times.append(elapsed)
    return times, first


def program_facts(prog) -> dict:
    """The program's collectives by kind and its expert bytes per device and whole (`memory()`)."""
    kinds = Counter(line.split(" over ")[0].split(".")[-1] for line in prog.explain().splitlines()
                    if line.strip()[:1].isdigit() and " over [" in line and "shard." in line)
    experts = [b for b in prog.memory().arguments if "experts_w" in b.label]
    return {"collectives": dict(kinds), "expert_bytes_per_device": sum(b.bytes_per_device for b in experts),
            "expert_bytes": sum(b.global_bytes for b in experts)}


def main(argv=None) -> int:
    args = parse(argv)
    model, loss_fn, batch = switch_moe(seed=0, groups=args.groups, seq=args.seq, d_model=args.d_model,
                                       hidden=args.hidden, experts=args.experts)
    optimizer = slicer.AdamW(1e-3)
    step = slicer.training_step(model, loss_fn, *batch, optimizer=optimizer)
    strategies = {"slicer_expert_parallel": st.expert_parallel(step, "x", mesh={"x": 2}) + st.data_parallel(step, "x"),
                  "slicer_data_parallel": st.data_parallel(step, "x")}
    tokens = args.groups * args.seq
    results: dict[str, dict] = {}
    times, first = torch_times(model, loss_fn, batch, optimizer, args.warmup, args.steps)
    results["torch_2_threads"] = {"median_s": statistics.median(times), "min_s": min(times), "first_loss": first}
    for name, tactics in strategies.items():
        prog = slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=tactics)
        times, first = slicer_times(prog, batch, args.warmup, args.steps)
        results[name] = {"median_s": statistics.median(times), "min_s": min(times), "first_loss": first,
                         **program_facts(prog)}
    want = results["torch_2_threads"]["first_loss"]
    failed = [n for n, r in results.items() if abs(r["first_loss"] - want) > RTOL * abs(want)]
    for r in results.values():
        r["tokens_per_s"] = tokens / r["median_s"]
    ep = results["slicer_expert_parallel"]["median_s"]
    summary = {"sizes": {k: v for k, v in vars(args).items() if k != "json"}, "results": results,
               "expert_parallel_vs_data_parallel": results["slicer_data_parallel"]["median_s"] / ep,
               "expert_parallel_vs_torch": results["torch_2_threads"]["median_s"] / ep,
               "cpu_count": os.cpu_count(), "failed": failed}
    text = json.dumps(summary, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
