"""Where the ResNet-18-style training step of `convolutions.py step` spends its time on Slicer's 2 data-parallel
ranks, per kernel kind (convolution forward, input gradient, weight gradient; BatchNorm's statistics and other
reductions; elementwise; copies; collectives), next to torch's per-op profile of the same step.

    python benchmarks/conv_profile.py [--batch 16 --image 32 --widths 64,128,256,512] [--precision bf16]
                                      [--clock cpu] [--split-ops] [--json profile.json]

The ranks run as `training_profile.py` runs them (its `--worker` mode: a `ResidentRank` per rank, each step's
timeline of kernels and collectives). A convolution is a contraction kernel whose input is read through a sum
or a multiple of loop dims (`oh * s + kh`); its kind: "weight grad" when its result has the weight's shape
(the last two dims the filter's), "forward" before the loss (the first kernel with `math.exp`/`math.log`) and
"input grad" after. Best with `--split-ops` (one kernel per linalg op; otherwise a kernel counts as its first
convolution's kind). torch: `torch.profiler` self CPU time per aten op over the same steps (2 threads).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "examples" / "zoo"))

from training_profile import compiled_job, kernel_bodies, kernel_kind, run_job, summary, top_kernels  # noqa: E402

_ALIAS = re.compile(r"^(#map\d*) = (affine_map<.*>)$", re.M)
_SUM_MAP = re.compile(r"affine_map<\([^)]*\) -> \([^)]*(d\d+ \* \d+|d\d+ \+ d\d+)[^)]*\)>")
_RESULT = re.compile(r"-> \(?tensor<([\dx]+)x[a-z0-9]+>")


def conv_kinds(mlir: str, names: list[str]) -> dict[str, str]:
    """Kernel name -> its kind (module docstring), `names` in the graph's order."""
    aliases = dict(_ALIAS.findall(mlir))
    bodies = kernel_bodies(mlir)
    kinds, after_loss = {}, False
    for name in names:
        body = bodies.get(name, "")
        resolved = re.sub(r"#map\d*\b", lambda m: aliases.get(m.group(0), m.group(0)), body)
        kind = kernel_kind(body)
        after_loss = after_loss or "math.exp" in body or "math.log" in body
        if kind == "contraction" and _SUM_MAP.search(resolved):
            shape = [int(d) for d in _RESULT.search(body.split("\n")[0]).group(1).split("x")] \
                if _RESULT.search(body.split("\n")[0]) else []
            if len(shape) == 4 and shape[2] == shape[3] and shape[2] in (1, 3, 7) and shape[0] != shape[2]:
                kind = "conv weight grad"
            else:
                kind = "conv input grad" if after_loss else "conv forward"
        elif "maxf" in body or "maximumf" in body:
            kind = f"{kind} (max: pool/relu)"
        kinds[name] = kind
    return kinds


def build(args):
    import torch
    import zoo_models

    import slicer

    torch.manual_seed(0)
    model = zoo_models.ResNet18(tuple(int(w) for w in args.widths.split(","))).train()
    generator = torch.Generator().manual_seed(0)
    data = [(torch.randn(args.batch, 3, args.image, args.image, generator=generator),
             torch.randint(0, 10, (args.batch,), generator=generator)) for _ in range(2 + args.steps)]
    precision = slicer.MixedPrecision(param_dtype="bf16", reduce_dtype="f32") if args.precision == "bf16" else None
    step = slicer.training_step(model, zoo_models._classify, *data[0], optimizer=slicer.SGD(lr=0.01),
                                precision=precision)
    return model, data, step


def prepare(step, data, split_ops: bool) -> dict:
    """The data-parallel program on x=2 as a rank job (`training_profile.compiled_job`), each kernel's
    convolution kind and the kernels' MLIR."""
    import slicer
    from slicer import strategies
    from slicer.lowering import CollectiveNode

    job, graph = compiled_job(step, slicer.Mesh(x=2), strategies.data_parallel(step, "x"), data, split_ops)
    names = [n.name for n in graph.nodes if not isinstance(n, CollectiveNode)]
    job["kinds"] = conv_kinds(graph.kernels_mlir, names)
    job["mlir"] = graph.kernels_mlir
    return job


def torch_profile(model, data, precision: str, threads: int) -> dict:
    import torch
    import zoo_models
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(threads)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def one(images, labels):
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = zoo_models._classify(model, images, labels)
        loss.backward()
        optimizer.step()

    if threads == 1:  # a DDP rank's work: half the batch on one thread (but the gradients' all_reduce)
        data = [(images[:len(images) // 2], labels[:len(labels) // 2]) for images, labels in data]
    for images, labels in data[:2]:
        one(images, labels)
    times, cpu = [], []
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for images, labels in data[2:]:
            start, start_cpu, start_thread = time.perf_counter(), time.process_time(), time.thread_time()
            one(images, labels)
            times.append(time.perf_counter() - start)
            cpu.append((time.process_time() if threads > 1 else time.thread_time()) - (
                start_cpu if threads > 1 else start_thread))
    ops = {e.key: e.self_cpu_time_total / 1e6 / len(times) for e in prof.key_averages() if e.self_cpu_time_total > 0}
    return {"step_s": statistics.median(times), "step_process_cpu_s": statistics.median(cpu),
            "top": sorted(ops.items(), key=lambda kv: -kv[1])[:25]}


def by_kind(reports: list[dict], kinds: dict[str, str]) -> dict[str, float]:
    """Rank 0's median seconds per kernel kind (conv kinds included), collectives and the executor's Python."""
    per: dict[str, list[float]] = defaultdict(list)
    for step in reports[0]["steps"]:
        sums: dict[str, float] = defaultdict(float)
        busy = 0.0
        for label, kind, start, end in step["events"]:
            busy += end - start
            sums[kinds.get(label, "?") if kind == "kernel" else f"collective {kind}"] += end - start
        sums["python between actions"] = step["seconds"] - busy
        sums["total"] = step["seconds"]
        for key, value in sums.items():
            per[key].append(value)
    return {k: statistics.median(v) for k, v in per.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--image", type=int, default=32)
    parser.add_argument("--widths", default="64,128,256,512")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--precision", choices=("f32", "bf16"), default="f32")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    parser.add_argument("--split-ops", action="store_true")
    parser.add_argument("--torch-threads", type=int, choices=(1, 2), default=2,
                        help="1: half the batch on one thread (a DDP rank's work), its thread CPU time")
    parser.add_argument("--json")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.torch_threads))
    out: dict = {"load": os.getloadavg(), "args": vars(args)}
    print(f"load average {out['load'][0]:.1f} on {os.cpu_count()} cores", flush=True)
    model, data, step = build(args)
    out["torch"] = torch_profile(model, data, args.precision, args.torch_threads)
    print(f"torch {args.torch_threads} threads: {out['torch']['step_s'] * 1e3:.1f} ms a step "
          f"(process CPU {out['torch']['step_process_cpu_s'] * 1e3:.1f} ms); self CPU per op (ms, all threads):")
    for key, seconds in out["torch"]["top"]:
        print(f"  {seconds * 1e3:8.2f}  {key}")
    job = prepare(step, data, args.split_ops)
    reports = run_job(job, 2, args.clock)
    table = by_kind(reports, job["kinds"])
    out["slicer"] = {"by_kind": table, "top": top_kernels(reports, job["kinds"], 25), "compile_s": job["compile_s"],
                     "table": summary(reports, {})}
    print(f"\nSlicer data parallel, rank 0 ({args.clock} clock), median of {args.steps} steps (ms):")
    for key in sorted(table, key=lambda k: -table[k]):
        print(f"  {table[key] * 1e3:8.1f}  {key}")
    print("top kernels / collectives on rank 0:")
    for label, kind, seconds in out["slicer"]["top"]:
        print(f"  {seconds * 1e3:8.2f} ms  {label}  [{job['kinds'].get(label.split(' (')[0], kind)}]")
    if args.json:
        Path(args.json).write_text(json.dumps(out | {"mlir": job["mlir"]}))


if __name__ == "__main__":
    main()
