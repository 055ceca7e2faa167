"""Where the GPT training step of `training.py` spends its time on Slicer's ranks, per kernel kind, next to
torch's per-op profile of the same step.

    python benchmarks/training_profile.py data [--steps 5] [--json profile.json]
    python benchmarks/training_profile.py data,fsdp,megatron --torch     # and torch's profile (1 process, 1 thread,
                                                                         # half the batch: a DDP rank's work)

The driver imports and partitions the step as `training_slicer.py` does, compiles its kernels, then runs it on
2 MPI ranks (this file's `--worker` mode: a `ResidentRank` per rank, as a session's rank runs it) and reads
each step's timeline (`ResidentRank.events`: one event per kernel, collective start and wait). Per kernel kind
(`kernel_kinds`: contractions, row kernels, the optimizer's elementwise update, other elementwise or copies;
the kind read from the kernel's MLIR), collective (start, i.e. packing and publishing; wait, i.e. transfer
and unpacking) and the Python time between actions (the executor's own overhead), the median over steps of
rank 0's seconds; plus each rank's VmHWM and what the executor holds (packing buffers, shared windows).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from training_common import ADAMW, MODELS, Sizes, autocast, batches, build_model, loss_function, peak_rss_mib

_FUNC = re.compile(r"func\.func (?:public |private )?@([\w.$-]+)\(")


def kernel_bodies(mlir: str) -> dict[str, str]:
    """Each function of the kernel module's text by name."""
    starts = [(m.start(), m.group(1)) for m in _FUNC.finditer(mlir)]
    return {name: mlir[s:(starts[i + 1][0] if i + 1 < len(starts) else len(mlir))]
            for i, (s, name) in enumerate(starts)}


def kernel_kind(body: str) -> str:
    """What a kernel mostly does, from its MLIR: "embedding-grad" (a sum over tokens of rows selected by a
    one-hot comparison: an embedding's gradient, lowering/onehot.py), "contraction" (a reduction over a
    product of two operands), "optimizer" (sqrt and division over many operands: AdamW's update), "row" (a
    reduction that is not a contraction: softmax, layernorm, their backward, sums of gradients over rows),
    "elementwise" (a map with arithmetic), "copy" (data movement only: transposes, slices, concatenations)."""
    reduction = "reduction" in body
    contraction = reduction and bool(re.search(r"arith\.mulf[^\n]*\n[^\n]*arith\.addf", body))
    if contraction and "arith.cmpi eq" in body and "arith.uitofp" in body:
        return "embedding-grad"
    if "linalg.matmul" in body or "linalg.batch_matmul" in body or contraction:
        return "contraction"
    if "math.sqrt" in body and "arith.divf" in body and not reduction:
        return "optimizer"
    if reduction:
        return "row"
    if re.search(r"arith\.(mulf|addf|subf|divf)|math\.", body):
        return "elementwise"
    return "copy"


# -- driver ------------------------------------------------------------------------------------------------
def prepare(strategy: str, sizes: Sizes, data, step, split_ops: bool) -> dict:
    """The strategy's program partitioned, its kernels compiled, and what the ranks need, as a picklable job
    (`compiled_job`), with each kernel's kind and body."""
    from training_slicer import tactics_for

    from slicer.lowering import CollectiveNode

    mesh, tactics = tactics_for(step, strategy, sizes)
    job, graph = compiled_job(step, mesh, tactics, data, split_ops)
    bodies = kernel_bodies(graph.kernels_mlir)
    job["kinds"] = {n.name: kernel_kind(bodies.get(n.name, "")) for n in graph.nodes
                    if not isinstance(n, CollectiveNode)}
    job["bodies"] = bodies
    return job


def compiled_job(step, mesh, tactics, data, split_ops: bool) -> tuple[dict, object]:
    """(the picklable job the ranks run, the kernel graph) of `step` compiled on `mesh` under `tactics`: the
    graph, kernel sources, feeds, compile seconds, each rank's state and batches. `split_ops`: one kernel per
    linalg op (`lowering.cut` forced to cut after every op), so that each kernel event is one op of the step
    (elementwise chains lose their fusion). Shared with conv_profile.py."""
    import slicer
    from slicer.lowering import cut
    from slicer.runtime.execution.executor import kernel_sources, load_kernels

    saved = cut.MAX_OPS
    cut.MAX_OPS = 1 if split_ops else saved
    try:
        program = slicer.compile(step, mesh=mesh, tactics=tactics)
    finally:
        cut.MAX_OPS = saved
    plan = program._session_plan(None)
    graph = plan.graph
    start = time.perf_counter()
    kernels, backend = load_kernels(graph)
    compiled = time.perf_counter() - start
    ranks = graph.mesh.device_count
    return {"graph": graph.to_json(), "sources": kernel_sources(kernels, backend), "feeds": dict(plan.feeds),
            "compile_s": compiled,
            "state": [{i: plan.block(a, i, r) for i, a in plan.state.items()} for r in range(ranks)],
            "batches": [[{i: plan.block(a, i, r) for i, a in step_inputs(plan, number, batch).items()}
                         for r in range(ranks)] for number, batch in enumerate(data)]}, graph


def step_inputs(plan, number: int, batch) -> dict:
    """Step `number`'s global inputs by argument index: the batch and the hyperparameters (the optimizer's
    settings), as a session's `step` gives them."""
    inputs = plan.checked_inputs([b.numpy() for b in batch])
    return inputs | (plan.hyper_inputs(number, {}) if plan.hyper else {})


def run_job(job: dict, warmup: int, clock: str = "wall") -> list[dict]:
    """Run `job` on its ranks; every rank's report (`worker`)."""
    from slicer.runtime.jobs.mpiexec import run_spmd

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "job.pickle"
        path.write_bytes(pickle.dumps({**job, "warmup": warmup, "clock": clock}))
        done = run_spmd(2, [sys.executable, str(Path(__file__).resolve()), "--worker", str(path)], timeout=3600)
        if done.returncode != 0:
            raise SystemExit(f"the profile's ranks failed:\n{str(done.stderr)[-4000:]}")
        return [json.loads(Path(f"{path}.{r}.json").read_text()) for r in range(2)]


# -- ranks -------------------------------------------------------------------------------------------------
def held_bytes(rank_program) -> dict:
    """What the rank's executor holds besides the blocks of values: MPI pack/receive buffers, shared-memory
    windows (this rank's part); and the resident state's blocks. (Collective outputs are blocks of values, new at
    every run: `runtime/execution/executor.py`.)"""
    packed, slots = 0, {}
    for program in rank_program.executor.programs.values():
        packed += sum(b.nbytes for b in (program.send, program.recv) if b is not None)
        if program.shm is not None:  # (collectives never in flight together share a slot)
            slots[id(program.shm.slot)] = program.shm.slot
    shared = sum(s.data.shape[1] + s.data2.shape[1] + 192 for slot in slots.values() for s in slot.segments)
    state = sum(b.nbytes for b in rank_program.resident.values())
    return {"packed_mib": packed / 2**20, "shared_mib": shared / 2**20,
            "state_mib": state / 2**20, "executor_peak_mib": rank_program.executor.buffers.peak / 2**20}


def worker(path: str) -> None:
    from mpi4py import MPI

    from slicer.lowering import KernelGraph
    from slicer.runtime.jobs.heap import keep_freed_memory
    from slicer.runtime.state.resident import ResidentRank

    keep_freed_memory()  # as a session's rank (runtime/jobs/rank_server.py)

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    job = pickle.loads(Path(path).read_bytes())
    if job.get("clock") == "cpu":  # every timestamp of this rank (the executor's events too) in its CPU time
        time.perf_counter = time.thread_time
    program = ResidentRank(KernelGraph.from_json(job["graph"]), comm, feeds=job["feeds"], kernel_sources=job["sources"])
    program.put(job["state"][rank])
    steps = []
    for number, batch in enumerate(job["batches"]):
        comm.Barrier()
        start = time.perf_counter()
        program.step(batch[rank])
        end = time.perf_counter()
        if number >= job["warmup"]:
            steps.append({"seconds": end - start, "events": [(e.label, e.kind, e.start - start, e.end - start)
                                                             for e in program.events]})
    report = {"rank": rank, "steps": steps, "peak_rss_mib": peak_rss_mib(), "held": held_bytes(program)}
    Path(f"{path}.{rank}.json").write_text(json.dumps(report))
    program.close()


def categories(step: dict, kinds: dict[str, str]) -> dict[str, float]:
    """One step's seconds by category: each kernel kind, each collective op's start and wait, and the
    executor's own time between actions ("python")."""
    out: dict[str, float] = defaultdict(float)
    busy = 0.0
    for label, kind, start, end in step["events"]:
        busy += end - start
        if kind == "kernel":
            out[f"kernel {kinds.get(label, '?')}"] += end - start
        else:
            out[f"{label.split()[0]} {kind}"] += end - start
    out["python between actions"] = step["seconds"] - busy
    out["total"] = step["seconds"]
    return out


def summary(reports: list[dict], kinds: dict[str, str]) -> dict[str, list[float]]:
    """Per category, per rank: the median over steps of its seconds."""
    table: dict[str, list[float]] = {}
    for r, report in enumerate(reports):
        per_step = [categories(s, kinds) for s in report["steps"]]
        for key in set().union(*per_step):
            table.setdefault(key, [0.0] * len(reports))[r] = statistics.median(p.get(key, 0.0) for p in per_step)
    return table


def top_kernels(reports: list[dict], kinds: dict[str, str], count: int = 30) -> list[tuple[str, str, float]]:
    """The `count` kernels taking the most time on rank 0 (median over steps, summed over their calls)."""
    per: dict[str, list[float]] = defaultdict(list)
    for step in reports[0]["steps"]:
        sums: dict[str, float] = defaultdict(float)
        for label, kind, start, end in step["events"]:
            sums[f"{label} ({kind})"] += end - start
        for key, value in sums.items():
            per[key].append(value)
    ranked = sorted(((k, statistics.median(v)) for k, v in per.items()), key=lambda kv: -kv[1])[:count]
    return [(k, kinds.get(k.split(" (")[0], "collective"), v) for k, v in ranked]


# -- torch -------------------------------------------------------------------------------------------------
_TORCH_KINDS = (("embedding-grad", ("embedding_dense_backward", "index_put_", "_index_put_impl_", "index_add_")),
                ("contraction", ("mm", "addmm", "bmm", "matmul", "linear", "baddbmm")),
                ("optimizer", ("_foreach", "adam", "lerp", "addcdiv", "addcmul", "sqrt")),
                ("row", ("softmax", "layer_norm", "log_softmax", "nll_loss", "sum", "mean", "cross_entropy")),
                ("copy", ("copy_", "clone", "contiguous", "cat", "index", "embedding", "masked_fill", "fill_",
                          "zero_", "t", "transpose", "view", "reshape", "permute", "expand", "empty", "slice")))


def torch_kind(name: str) -> str:
    """The kind of a torch profiler event: an aten op's, or "runtime" for the rest (autograd's engine, the
    optimizer's Python, torch's dispatch between ops)."""
    if "EmbeddingBackward" in name:  # embedding_dense_backward's work shows as its autograd node's self time
        return "embedding-grad"
    if not name.startswith("aten::"):
        return "runtime"
    bare = name.removeprefix("aten::")
    for kind, words in _TORCH_KINDS:
        substring = kind in ("optimizer", "row")  # their names vary (_foreach_addcdiv_, softmax_backward_data)
        if any(w in bare if substring else bare in (w, w + "_") for w in words):
            return kind
    return "elementwise"


def torch_profile(sizes: Sizes, data, steps: int, threads: int = 2) -> dict:
    """torch's step (zero_grad, loss, backward, AdamW): on `threads` 2, the whole batch on 2 threads (the
    reference of training.py); on 1, half the batch on one thread (a DDP rank's work but the gradients'
    all_reduce); under autocast to bf16 with `--precision bf16`. Self CPU time per op and per kind, median step
    wall time."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(threads)
    model = build_model(sizes)
    optimizer = torch.optim.AdamW(model.parameters(), **ADAMW)
    loss_fn, half = loss_function(sizes), sizes.batch // (3 - threads)

    def one(idx, targets):
        optimizer.zero_grad(set_to_none=True)
        with autocast(sizes):  # --precision bf16: torch.autocast, as training.py's torch contenders
            loss = loss_fn(model, idx[:half], targets[:half])
        loss.backward()
        optimizer.step()
        return loss.item()

    for idx, targets in data[:2]:
        one(idx, targets)
    times, cpu = [], []
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for idx, targets in data[2:2 + steps]:
            start, start_cpu = time.perf_counter(), time.thread_time()
            one(idx, targets)
            times.append(time.perf_counter() - start)
            cpu.append(time.thread_time() - start_cpu)
    ops, kinds = {}, defaultdict(float)
    for event in prof.key_averages():
        seconds = event.self_cpu_time_total / 1e6 / len(times)
        if seconds > 0:
            ops[event.key] = seconds
            kinds[torch_kind(event.key)] += seconds
    return {"step_s": statistics.median(times), "step_cpu_s": statistics.median(cpu), "kinds": dict(kinds),
            "top": sorted(ops.items(), key=lambda kv: -kv[1])[:20]}


def print_profile(name: str, result: dict) -> None:
    table = result["table"]
    total = table["total"][0]
    print(f"\n{name}: median step {total * 1e3:.1f} ms on rank 0 ({table['total'][1] * 1e3:.1f} on rank 1); "
          f"{len(result['kinds'])} kernels, compiled in {result['compile_s']:.1f} s")
    print("| category | rank 0 ms | rank 1 ms | share |\n|---|---|---|---|")
    for key in sorted(table, key=lambda k: -table[k][0]):
        if key != "total":
            print(f"| {key} | {table[key][0] * 1e3:.1f} | {table[key][1] * 1e3:.1f} | {table[key][0] / total:.0%} |")
    print("top kernels / collectives on rank 0:")
    for label, kind, seconds in result["top"][:30]:
        print(f"  {seconds * 1e3:8.2f} ms  {label}  [{kind}]")
    for r, report in enumerate(result["ranks"]):
        held = ", ".join(f"{k} {v:.0f}" for k, v in report["held"].items())
        print(f"rank {r}: VmHWM {report['peak_rss_mib']:.0f} MiB; {held}")


def slicer_kind(category: str) -> str:
    """A category of `categories` as a kind of `side_by_side`: a kernel's kind, "collectives", "runtime"."""
    if category.startswith("kernel "):
        return category.removeprefix("kernel ")
    return "runtime" if category == "python between actions" else "collectives"


def side_by_side(table: dict[str, list[float]], torch_result: dict,
                 torch_total: float) -> dict[str, tuple[float, float]]:
    """Per kind, (Slicer rank 0's seconds, torch's): torch's profiler self times by kind (wall times: scaled by
    `torch_total` over the step's wall time when `torch_total` is its CPU time, as if other jobs' load slowed
    every op alike), the part of `torch_total` that no op accounts for counted as "runtime"."""
    kinds: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for category, seconds in table.items():
        if category != "total":
            kinds[slicer_kind(category)][0] += seconds[0]
    scale = torch_total / torch_result["step_s"]
    for kind, seconds in torch_result["kinds"].items():
        kinds[kind][1] += seconds * scale
    kinds["runtime"][1] += max(0.0, torch_total - scale * sum(torch_result["kinds"].values()))
    kinds["total"] = [table["total"][0], torch_total]
    return {k: tuple(v) for k, v in kinds.items()}


def print_side_by_side(rows: dict[str, tuple[float, float]], strategy: str) -> None:
    print(f"\n{strategy} rank 0 next to torch, by kind (ms; torch: profiler self time, op wall time):")
    print("| kind | Slicer | torch |\n|---|---|---|")
    for kind in sorted(rows, key=lambda k: (k == "total", -rows[k][0])):
        print(f"| {kind} | {rows[kind][0] * 1e3:.1f} | {rows[kind][1] * 1e3:.1f} |")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("strategies", nargs="?", default="data", help="comma-separated: data, fsdp, megatron")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--split-ops", action="store_true", help="one kernel per linalg op (per-op profile)")
    parser.add_argument("--torch", action="store_true", help="also torch's per-op profile of the same step")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: the ranks' thread CPU time (robust to other load; waiting asleep counts 0), and "
                        "torch's step in CPU time too")
    parser.add_argument("--model", choices=sorted(MODELS), default="example",
                        help="the example GPT or GPT-2 small (training_common.MODELS)")
    parser.add_argument("--layers", type=int, help="fewer (or more) layers than the model's")
    parser.add_argument("--seq", type=int, help="another sequence length than the model's (training.py --seq)")
    parser.add_argument("--batch", type=int, help="another batch than the model's (training.py --batch)")
    parser.add_argument("--torch-threads", type=int, choices=(1, 2), default=2,
                        help="2: torch's whole step on 2 threads (training.py's reference); 1: half the batch "
                        "on 1 thread (a DDP rank's work but the all_reduce)")
    parser.add_argument("--precision", choices=("f32", "bf16"), default="f32",
                        help="bf16: slicer.MixedPrecision(bf16, f32) (torch: autocast), as training.py --precision")
    parser.add_argument("--top", type=int, default=30, help="how many kernels and collectives to list (default 30)")
    parser.add_argument("--json")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args.worker)
    import slicer

    base = MODELS[args.model]
    sizes = replace(base, warmup=2, steps=args.steps, n_layer=args.layers or base.n_layer, precision=args.precision,
                    seq=args.seq or base.seq, batch=args.batch or base.batch)
    data = batches(sizes)
    out = {"load": os.getloadavg(), "sizes": asdict(sizes)}
    print(f"{sizes}; load average {out['load'][0]:.1f} on {os.cpu_count()} cores", flush=True)
    if args.torch:
        out["torch"] = torch_profile(sizes, data, args.steps, args.torch_threads)
        print(f"torch, {args.torch_threads} thread(s): {out['torch']['step_s'] * 1e3:.1f} ms wall, "
              f"{out['torch']['step_cpu_s'] * 1e3:.1f} ms CPU; by kind (profiler, wall ms): " +
              ", ".join(f"{k} {v * 1e3:.1f}" for k, v in sorted(out["torch"]["kinds"].items(), key=lambda kv: -kv[1])))
        for key, seconds in out["torch"]["top"]:
            print(f"  {seconds * 1e3:8.2f} ms  {key}")
    optimizer = slicer.AdamW(lr=ADAMW["lr"], betas=ADAMW["betas"], eps=ADAMW["eps"], weight_decay=ADAMW["weight_decay"])
    precision = slicer.MixedPrecision(param_dtype="bf16", reduce_dtype="f32") if sizes.precision == "bf16" else None
    step = slicer.training_step(build_model(sizes), loss_function(sizes), *data[0], optimizer=optimizer,
                                precision=precision)
    for strategy in args.strategies.split(","):
        job = prepare(strategy, sizes, data, step, args.split_ops)
        reports = run_job(job, sizes.warmup, args.clock)
        result = {"table": summary(reports, job["kinds"]), "top": top_kernels(reports, job["kinds"], args.top),
                  "kinds": job["kinds"], "compile_s": job["compile_s"], "ranks": reports}
        print_profile(strategy, result)
        if "torch" in out:
            cpu = args.clock == "cpu" and args.torch_threads == 1  # one thread: its CPU time is the step's
            torch_total = out["torch"]["step_cpu_s" if cpu else "step_s"]
            result["side_by_side"] = side_by_side(result["table"], out["torch"], torch_total)
            print_side_by_side(result["side_by_side"], strategy)
        out[strategy] = {k: v for k, v in result.items() if k != "ranks"} | {"bodies": job["bodies"]} | {
            "ranks": [{k: v for k, v in r.items() if k != "steps"} for r in reports]}
    if args.json:
        Path(args.json).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
