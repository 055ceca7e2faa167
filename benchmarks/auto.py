"""Automatic partitioning (`slicer.auto`) against the canonical strategies written by hand.

Programs (PyTorch, imported with `slicer.from_torch` / `slicer.training_step`; the modules of
examples/training/model.py): `mlp` (fc1, gelu, fc2), `attention` (q/k/v/proj, causal, 4 heads), `block` (a GPT-2
block: pre-norm attention and MLP), `gpt4` (a 4-layer GPT forward: embeddings, blocks, LM head) and `gpt4_step`
(its training step with AdamW). Meshes: 2, 4 and 8 devices, 1-D (`x`) and 2-D (`x` for data, `y` for the
model). Each case runs without a budget and with one that forbids replicated parameters: the model's peak of
data parallelism minus half of what sharding the parameters (and optimizer state) over all devices would save.

Contenders: `auto`, and by hand (`slicer.strategies`): `data` (the inputs' dim 0 over every axis), `megatron`
(heads and MLP hidden units over every axis), `fsdp` (data + parameters sharded, ZeRO-3), and `data_megatron`
(data over x, Megatron over y) on 2-D meshes. For each: the tactics, the search time (auto's includes compiling
its best candidates), the predicted time and peak of the compiled program (its kernel graph priced as
`slicer.auto` prices the candidates it compiles, `slicer.automatic.graph_cost`; `model_s` is the search model's
figure before compiling), the kernel graph's peak per device, and on 2 devices the time measured on 2 MPI ranks
(`--rounds` interleaved rounds, each the median of `--repeat` runs of the slowest rank; the median round counts;
`paired_ratio` is also the median over rounds of auto's time over the best hand-written one's in the same round).
The machine has 2 cores: cases of 4 and 8 devices are predicted and compiled (memory from the kernel graph) but
not timed. Predictions use this machine's figures when calibrated (`slicer-plan --calibrate -n 2` first: the links
between 2 ranks and the kernels' figures, `slicer.automatic.Machine`), else the built-in ones; the figures used
are printed and stored in the JSON.

    python benchmarks/auto.py --json auto.json                 # every case (~4 min)
    python benchmarks/auto.py --small --cases mlp --meshes 2   # the smoke test's size
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "training"))

SIZES = {"full": {"batch": 8, "seq": 64, "d_model": 128, "n_head": 4, "vocab": 256},
         "small": {"batch": 4, "seq": 8, "d_model": 32, "n_head": 4, "vocab": 32}}
MESHES = {"2": {"x": 2}, "4": {"x": 4}, "2x2": {"x": 2, "y": 2}, "8": {"x": 8}, "2x4": {"x": 2, "y": 4}}
CASES = ("mlp", "attention", "block", "gpt4", "gpt4_step")
COLUMN = ["*q.*", "*k.*", "*v.*", "*fc1.*"]
ROW = ["*proj.weight", "*fc2.weight"]


def build(case: str, sizes: dict):
    """(imported program, numpy inputs) of `case`."""
    import torch
    from model import GPT, Attention, Block, loss_fn

    import slicer

    torch.manual_seed(0)
    b, s, d, h, v = (sizes[k] for k in ("batch", "seq", "d_model", "n_head", "vocab"))
    if case == "mlp":
        model = torch.nn.Sequential()
        model.fc1, model.act, model.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.GELU("tanh"), torch.nn.Linear(4 * d, d)
        x = torch.randn(b * s, d)
        return slicer.from_torch(model.eval(), x), (x.numpy(),)
    if case in ("attention", "block"):
        model = (Attention if case == "attention" else Block)(d, h, s).eval()
        x = torch.randn(b, s, d)
        return slicer.from_torch(model, x), (x.numpy(),)
    model = GPT(v, s, d, h, 4)
    idx = torch.randint(0, v, (b, s))
    if case == "gpt4":
        return slicer.from_torch(model.eval(), idx), (idx.numpy(),)
    step = slicer.training_step(model, loss_fn, idx, idx.clone(), optimizer=slicer.AdamW(lr=1e-3))
    return step, (idx.numpy(), idx.numpy())


def strategies(program, mesh) -> dict:
    """The hand-written contenders on `mesh` (tactic lists)."""
    from slicer import strategies as st
    from slicer.tactics.patterns import matching

    params = program.parameter_names
    column, row = ([p for p in patterns if matching(p, params)] for patterns in (COLUMN, ROW))
    axes = tuple(mesh.axis_names)
    found = {"data": st.data_parallel(program, axes), "megatron": st.megatron(program, axes, column, row)}
    found["fsdp"] = st.zero(program, axes, stage=3, mesh=mesh)
    if len(axes) == 2:
        found["data_megatron"] = st.data_parallel(program, "x") + st.megatron(program, "y", column, row)
    return found


def price(program, mesh, tactics):
    """The search model's (predicted seconds, peak bytes) of `tactics` (what the search's descent says of them,
    before compiling)."""
    from slicer.automatic import Evaluator, read_sketch
    from slicer.automatic.candidates import resolve_fixed

    sketch = read_sketch(program.text, program.entry, program.arg_names, program.result_names)
    names = sketch.arg_names
    follow = {r: names.index(n) for r, n in enumerate(sketch.result_names) if n and n in names}
    fixed = resolve_fixed(sketch, tuple(tactics))
    layouts = tuple(fixed.get(i, ((),) * len(sketch.shapes[i])) for i in range(sketch.num_args))
    est = Evaluator(sketch, mesh, follow=follow).evaluate(layouts)
    return est.total, est.peak_bytes


def price_compiled(graph):
    """(predicted seconds, peak bytes) of a compiled program: its kernel graph priced as `slicer.auto` prices
    the candidates it compiles (`slicer.automatic.graph_cost`)."""
    from slicer.automatic import Machine
    from slicer.automatic.graph_cost import price_graph
    from slicer.redistribution.costs import CostModel

    est = price_graph(graph, Machine.default(), CostModel.default())
    return est.total, est.peak_bytes


def budget_forcing_sharding(hand: dict) -> int | None:
    """A budget data parallelism misses but a strategy sharding the parameters meets: the smallest kernel-graph
    peak of `megatron`, `fsdp` and `data_megatron`, plus 2%, when that is below data parallelism's peak (else
    None: at this size sharding the parameters lowers no peak, the activations dominate)."""
    data = hand.get("data", {}).get("peak_bytes")
    sharded = [e["peak_bytes"] for n, e in hand.items() if n != "data" and "peak_bytes" in e]
    if data is None or not sharded or min(sharded) * 1.02 >= data:
        return None
    return int(min(sharded) * 1.02)


def contender(program, mesh, tactics) -> tuple[dict, object]:
    """Compile `tactics`: (entry with the kernel-graph peak and the predicted figures, the program or None)."""
    import slicer

    entry = {"tactics": slicer.format_tactics(tactics)}
    entry["model_s"], entry["model_peak_bytes"] = price(program, mesh, tactics)
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prog = slicer.compile(program, mesh=mesh, tactics=tactics)
    except slicer.SlicerError as exc:
        entry["error"] = str(exc).splitlines()[0][:300]
        return entry, None
    entry["compile_s"] = time.perf_counter() - start
    entry["peak_bytes"] = prog.graph.peak_bytes_per_device()[0]
    entry["predicted_s"], entry["predicted_peak_bytes"] = price_compiled(prog.graph)
    entry["spmd"] = prog.spmd
    return entry, prog


def measure(progs: dict, entries: dict, inputs, repeat: int, rounds: int) -> None:
    """Time every compiled contender on 2 ranks, `rounds` rounds interleaved (the machine is shared: load comes
    and goes within a minute, so each contender sees most of it); each round the median of `repeat` runs of the
    slowest rank; the median round counts (`measured_s`), every round is kept (`measured_rounds_s`)."""
    for _ in range(rounds):
        for name, prog in progs.items():
            _, timings = prog.run(*inputs, ranks=2, repeat=repeat, return_timings=True)
            entries[name].setdefault("measured_rounds_s", []).append(timings.seconds)
    for name in progs:
        entries[name]["measured_s"] = statistics.median(entries[name]["measured_rounds_s"])


def run_case(case: str, mesh_name: str, sizes: dict, repeat: int, built: dict, only=None,
             rounds: int = 3) -> list[dict]:
    import slicer

    program, inputs = built.setdefault(case, build(case, sizes))
    mesh = slicer.Mesh(MESHES[mesh_name])
    measure_it = mesh.device_count == 2
    hand, progs = {}, {}
    for name, tactics in strategies(program, mesh).items():
        if only is None or name in only:
            hand[name], prog = contender(program, mesh, tactics)
            if prog is not None:
                progs[name] = prog
    forcing = budget_forcing_sharding(hand)
    autos = []
    for budget in (None, forcing) if forcing else (None,):
        start = time.perf_counter()
        try:
            found = slicer.auto(program, mesh, memory_budget=budget)
        except slicer.AutoError as exc:
            autos.append((budget, {"error": str(exc)}, None))
            continue
        seconds = time.perf_counter() - start
        text = slicer.format_tactics(found.tactics)
        same = next((n for n, e in hand.items() if e.get("tactics") == text), None)
        auto, prog = (dict(hand[same]), None) if same else contender(program, mesh, found.tactics)
        same = same or next((n for n, e in hand.items() if e.get("spmd") and e.get("spmd") == auto.get("spmd")), None)
        auto.update(search_s=seconds, evaluations=found.evaluations, predicted_s=found.predicted_seconds.total,
                    predicted_peak_bytes=found.memory_bytes, compiled_candidates=len(found.compiled))
        if same:  # the same SPMD program as a hand-written one: its measurement (no second sample of the noise)
            auto["same_as"] = same
        elif prog is not None:
            progs[f"auto{len(autos)}"] = prog
        autos.append((budget, auto, same))
    if measure_it:
        entries = {**hand, **{f"auto{i}": a for i, (_, a, same) in enumerate(autos) if not same}}
        measure(progs, entries, inputs, repeat, rounds)
    rows = []
    for budget, auto, same in autos:
        if "error" in auto and "tactics" not in auto:
            rows.append({"case": case, "mesh": mesh_name, "budget": budget, "error": auto["error"], "hand": hand})
            print(f"| {case} | {mesh_name} | {budget} | {auto['error']} |", flush=True)
            continue
        if same:
            auto.update({k: v for k, v in hand[same].items() if k.startswith("measured")})
        rows.append({"case": case, "mesh": mesh_name, "budget": budget, "auto": auto, "hand": hand,
                     **_verdict(auto, hand, budget, measure_it)})
        print(_line(rows[-1]), flush=True)
    if not forcing:
        print(f"| {case} | {mesh_name} | (no budget forces parameter sharding: data parallelism has the smallest "
              "peak) |")
    for row in rows:
        for entry in [row.get("auto", {}), *row.get("hand", {}).values()]:
            entry.pop("spmd", None)
    return rows


def _verdict(auto: dict, hand: dict, budget, measure: bool) -> dict:
    """The best hand-written contender within the budget (by measured time on 2 ranks, else predicted), and
    auto's ratios to it."""
    key = "measured_s" if measure else "predicted_s"
    fits = {n: e for n, e in hand.items() if key in e and "error" not in e
            and (budget is None or e.get("peak_bytes", 0) <= budget)}
    out = {"within_budget": budget is None or auto.get("peak_bytes", 0) <= budget}
    if fits and key in auto:
        best = min(fits, key=lambda n: fits[n][key])
        out.update(best_hand=best, ratio=auto[key] / fits[best][key], ratio_of=key)
        rounds = auto.get("measured_rounds_s"), fits[best].get("measured_rounds_s")
        if measure and rounds[0] and rounds[1] and len(rounds[0]) == len(rounds[1]):
            # Paired by round (the contenders of a round run one after the other, under the same load): the load
            # of this 2-core machine drifts by 10-20% between rounds, which the ratio of the medians carries.
            out["paired_ratio"] = statistics.median(a / b for a, b in zip(*rounds))
    if measure and "measured_s" in auto:
        out["predicted_error"] = auto["predicted_s"] / auto["measured_s"] - 1
    return out


def _line(row: dict) -> str:
    a = row["auto"]
    ratio = f"{row['ratio']:.2f}x {row['best_hand']} ({row['ratio_of'][:-2]})" if "ratio" in row else "-"
    if "paired_ratio" in row:
        ratio += f", {row['paired_ratio']:.2f}x paired by round"
    measured = f"{a['measured_s'] * 1e3:.2f}" if "measured_s" in a else "-"
    budget = f"{row['budget'] / 2 ** 20:.2f} MiB" if row["budget"] else "none"
    over = "" if row["within_budget"] else " (over the budget)"
    return (f"| {row['case']} | {row['mesh']} | {budget} | `{a['tactics'] or '(replicated)'}` | {a['search_s']:.2f} | "
            f"{a['predicted_s'] * 1e3:.2f} | {measured} | {a.get('peak_bytes', 0) / 2 ** 20:.2f}{over} | {ratio} |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--meshes", default=",".join(MESHES))
    parser.add_argument("--small", action="store_true", help="toy sizes (the smoke test)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3,
                        help="interleaved rounds of timing on 2 ranks (the median counts)")
    parser.add_argument("--hand", help="only these hand-written contenders (comma-separated; default: all)")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    sizes = SIZES["small" if args.small else "full"]
    from slicer.automatic import Machine
    from slicer.redistribution.costs import CostModel

    figures = {"machine": str(Machine.default()), "links": str(CostModel.default())}
    print(f"figures: kernels {figures['machine']}; links {figures['links']}\n")
    print("| case | mesh | budget | auto's tactics | search s | predicted ms | measured ms | peak MiB | vs best hand |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows, built = [], {}
    for case in args.cases.split(","):
        for mesh_name in args.meshes.split(","):
            rows += run_case(case, mesh_name, sizes, args.repeat, built, args.hand.split(",") if args.hand else None,
                             args.rounds)
    if args.json:
        Path(args.json).write_text(json.dumps({"sizes": sizes, "figures": figures, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
