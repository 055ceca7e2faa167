"""The GPT training step on 2 cores: Slicer (data parallel, FSDP, Megatron on 2 MPI ranks) against PyTorch (one
process with 2 threads; DDP and FSDP2 over gloo with 2 processes) and JAX `jit` on 2 CPU devices with the same
shardings, all training the GPT of examples/training/model.py from the same initial parameters on the same
batches with AdamW.

    python benchmarks/training.py                         # 4 layers, D=512, 8 heads, seq 256, batch 8, f32
    python benchmarks/training.py --json training.json    # the same, and the results as JSON
    python benchmarks/training.py --small                 # toy sizes, few steps (the suite's smoke test)
    python benchmarks/training.py --contenders slicer_data,torch_ddp --layers 2 --steps 20
    python benchmarks/training.py --model gpt2-small      # GPT-2 small: 12 layers, D=768, vocab 50257, seq 128
    python benchmarks/training.py --precision bf16        # mixed precision: torch autocast, DDP + autocast,
                                                          # FSDP2's MixedPrecisionPolicy, slicer.MixedPrecision

Every contender runs in processes of its own (training_torch.py, training_jax.py, training_slicer.py), one
after another, so each one's peak memory (VmHWM per process) is its own and none competes with another for
the cores. Per contender: the median and min wall time of the timed steps (after `--warmup` untimed ones),
tokens/s (batch * seq / median), peak memory per process, the loss of step 1 and of the last step. The run
fails (exit 1, after the table) when a contender failed or its step-1 loss differs from torch's (the
one-process contender) by more than 1e-4 relative (2^-5 under bf16: each contender rounds at other points):
same parameters, same batch, the same loss up to rounding.
JAX is skipped, with a message, where it is not installed (`pip install -e '.[bench]'`).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from training_common import MODELS, OPENBLAS_VARIABLES, SMALL, Sizes  # noqa: E402

STRATEGIES = ("data", "fsdp", "megatron")
TORCH = ("torch_threads", "torch_ddp", "torch_fsdp2")
JAX = tuple(f"jax_{s}" for s in STRATEGIES)
SLICER = tuple(f"slicer_{s}" for s in STRATEGIES)
CONTENDERS = TORCH + JAX + SLICER
REFERENCE = "torch_threads"
FIRST_LOSS_RTOL = 1e-4
WORKER_TIMEOUT = 3600


def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = Sizes()
    parser.add_argument("--small", action="store_true", help="toy sizes and few steps (smoke test)")
    parser.add_argument("--precision", choices=("f32", "bf16"), default="f32",
                        help="bf16: mixed precision (torch autocast; DDP with autocast; FSDP2 with "
                        "MixedPrecisionPolicy(bf16, f32); Slicer with slicer.MixedPrecision(bf16, f32)); JAX skipped")
    parser.add_argument("--model", choices=sorted(MODELS), default="example",
                        help="the example GPT (default) or GPT-2 small (its sizes are the defaults)")
    for flag, field in (("--layers", "n_layer"), ("--d-model", "d_model"), ("--heads", "n_head"), ("--seq", "seq"),
                        ("--batch", "batch"), ("--vocab", "vocab"), ("--warmup", "warmup"), ("--steps", "steps")):
        parser.add_argument(flag, type=int, dest=field, help=f"default {getattr(default, field)} "
                            f"({getattr(SMALL, field)} with --small)")
    parser.add_argument("--contenders", default=",".join(CONTENDERS),
                        help="comma-separated, from: " + ", ".join(CONTENDERS))
    parser.add_argument("--rounds", type=int, default=1, help="run every contender this many times, in turn; "
                        "the timed steps of all rounds are pooled (default 1)")
    parser.add_argument("--no-jax", action="store_true", help="leave JAX out even where it is installed")
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args(argv)
    chosen = [c for c in args.contenders.split(",") if c]
    unknown = sorted(set(chosen) - set(CONTENDERS))
    if unknown:
        parser.error(f"unknown contender(s) {', '.join(unknown)}: choose from {', '.join(CONTENDERS)}")
    args.contenders = [c for c in CONTENDERS if c in chosen]
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1 (got {args.rounds})")
    base = replace(SMALL, model=args.model) if args.small else MODELS[args.model]
    base = replace(base, precision=args.precision)
    args.sizes = replace(base, **{k: v for k, v in vars(args).items() if k in asdict(base) and v is not None})
    s = args.sizes
    if s.d_model % s.n_head or s.n_head % 2 or s.batch % 2 or s.seq % 2:
        parser.error(f"need an even batch, seq and number of heads (Megatron splits the heads over 2), and the "
                     f"heads dividing d_model (got {s})")
    return args


def _run(argv: list[str], env: dict[str, str], label: str) -> tuple[dict | None, str | None]:
    """Run one worker; its JSON result, or None and why it failed."""
    with tempfile.TemporaryDirectory(prefix="training-bench-") as tmp:
        out = Path(tmp) / "result.json"
        print(f"running {label} ...", end=" ", flush=True)
        start = time.perf_counter()
        try:
            done = subprocess.run([sys.executable, *argv, str(out)], env=env, capture_output=True, text=True,
                                  timeout=WORKER_TIMEOUT)
        except subprocess.TimeoutExpired:
            print("timed out", flush=True)
            return None, f"{label} did not finish within {WORKER_TIMEOUT} s"
        print(f"{time.perf_counter() - start:.1f} s", flush=True)
        if done.returncode != 0 or not out.exists():
            return None, f"{label} failed (exit {done.returncode}):\n{(done.stderr or done.stdout)[-3000:]}"
        return json.loads(out.read_text()), None


def run_all(args) -> tuple[dict, dict, list[str]]:
    """Every chosen contender's record, the skipped ones (name -> why), the failures."""
    sizes, results, skipped, failures = args.sizes.to_json(), {}, {}, []
    environment = dict(os.environ)
    torch_env = {k: v for k, v in environment.items() if k not in OPENBLAS_VARIABLES}
    for name in (c for c in args.contenders if c in TORCH):
        result, error = _run([str(HERE / "training_torch.py"), name.removeprefix("torch_"), sizes], torch_env, name)
        results[name] = result
        failures += [error] if error else []
    jax_names = [c for c in args.contenders if c in JAX]
    reason = "--no-jax" if args.no_jax else "the JAX port is of the example GPT only" \
        if args.sizes.model != "example" else "the JAX port computes in f32 only" \
        if args.sizes.precision != "f32" else None if importlib.util.find_spec("jax") else \
        "jax is not installed (pip install -e '.[bench]')"
    if reason and jax_names:
        skipped.update((name, reason) for name in jax_names)
        print(f"JAX skipped: {reason}", flush=True)
    # a process per strategy, so each one's peak memory is its own; --small runs them in one to start faster
    groups = [jax_names] if args.small else [[name] for name in jax_names]
    for group in ([] if reason else [g for g in groups if g]):
        strategies = ",".join(n.removeprefix("jax_") for n in group)
        result, error = _run([str(HERE / "training_jax.py"), strategies, sizes], environment, f"jax ({strategies})")
        results.update(result["results"] if result else {})
        failures += [error] if error else []
    slicer_names = [c for c in args.contenders if c in SLICER]
    if slicer_names:
        strategies = ",".join(n.removeprefix("slicer_") for n in slicer_names)
        result, error = _run([str(HERE / "training_slicer.py"), strategies, sizes], environment,
                             "slicer (" + strategies + ")")
        failures += [error] if error else []
        for name in slicer_names:
            results[name] = result["results"][name] if result else None
        if result:
            results["_slicer_driver_peak_rss_mib"] = result["driver_peak_rss_mib"]
    driver = results.pop("_slicer_driver_peak_rss_mib", None)
    notes = {"skipped": skipped, "slicer_driver_peak_rss_mib": driver}
    return {k: v for k, v in results.items() if v is not None}, notes, failures


def check_losses(results: dict, rtol: float = FIRST_LOSS_RTOL) -> tuple[str | None, list[str]]:
    """The reference contender and the step-1 loss mismatches (each a message; `rtol`: `first_loss_rtol`)."""
    reference = REFERENCE if REFERENCE in results else next(iter(results), None)
    if reference is None:
        return None, []
    want = results[reference]["losses"][0]
    bad = []
    for name, entry in results.items():
        got = entry["losses"][0]
        entry["first_loss_rel_diff"] = abs(got - want) / abs(want)
        entry["final_loss_rel_diff"] = abs(entry["losses"][-1] - results[reference]["losses"][-1]) / \
            abs(results[reference]["losses"][-1])
        entry["worst_loss_rel_diff"] = max(abs(a - b) / abs(b) for a, b in zip(entry["losses"],
                                                                                 results[reference]["losses"]))
        if entry["first_loss_rel_diff"] > rtol:
            bad.append(f"{name}: step-1 loss {got:.7g} differs from {reference}'s {want:.7g} by "
                       f"{entry['first_loss_rel_diff']:.2e} relative (more than {rtol:g})")
    return reference, bad


def ratios(results: dict) -> dict:
    """Per Slicer (and JAX) contender: tokens/s over the best PyTorch contender's, and over JAX's of the same
    strategy."""
    torch_best = max((results[n]["tokens_per_s"], n) for n in TORCH if n in results) if \
        any(n in results for n in TORCH) else None
    out = {}
    for name in (n for n in SLICER + JAX if n in results):
        tps, strategy = results[name]["tokens_per_s"], name.split("_", 1)[1]
        entry = {}
        if torch_best:
            entry["vs_best_torch"] = tps / torch_best[0]
            entry["best_torch"] = torch_best[1]
        jax_name = f"jax_{strategy}"
        if name.startswith("slicer_") and jax_name in results:
            entry["vs_jax"] = tps / results[jax_name]["tokens_per_s"]
        out[name] = entry
    return out


def _precision_text(sizes: Sizes) -> str:
    return "f32" if sizes.precision == "f32" else f"mixed {sizes.precision} (f32 master parameters and update)"


def first_loss_rtol(sizes: Sizes) -> float:
    """How far a contender's step-1 loss may be from the reference's: 1e-4 in f32 (the same computation up to
    rounding); under bf16 each contender rounds at other points (autocast's op lists, FSDP2's casts, Slicer's
    one rounding per op), a few bf16 units."""
    return FIRST_LOSS_RTOL if sizes.precision == "f32" else 2 ** -5


def table(sizes: Sizes, results: dict, ratio: dict, reference: str | None, rounds: int = 1) -> str:
    head = (f"GPT training step ({sizes.model}): {sizes.n_layer} layers, D={sizes.d_model}, {sizes.n_head} heads, "
            f"seq {sizes.seq}, "
            f"batch {sizes.batch}, vocab {sizes.vocab}, {_precision_text(sizes)}, AdamW; median of {sizes.steps} "
            "steps after "
            f"{sizes.warmup} warm-up{f' x {rounds} rounds' if rounds > 1 else ''}; peak memory = VmHWM per "
            f"process; losses vs {reference}")
    rows = ["| contender | procs | median ms | min ms | tokens/s | peak MiB per process | step-1 loss | "
            "final loss | final vs ref | worst step vs ref | vs best torch | vs JAX |", "|" + "---|" * 12]
    for name in (n for n in CONTENDERS if n in results):
        e, r = results[name], ratio.get(name, {})
        vs = lambda key, r=r: f"{r[key]:.2f}x" if key in r else "-"  # noqa: E731
        rows.append(f"| {name} | {e['processes']} | {e['median_s'] * 1e3:.1f} | {e['min_s'] * 1e3:.1f} | "
                    f"{e['tokens_per_s']:.0f} | {', '.join(f'{m:.0f}' for m in e['peak_rss_mib'])} | "
                    f"{e['losses'][0]:.6f} | {e['losses'][-1]:.6f} | {e['final_loss_rel_diff']:.1e} | "
                    f"{e['worst_loss_rel_diff']:.1e} | "
                    f"{vs('vs_best_torch')} | {vs('vs_jax')} |")
    return head + "\n" + "\n".join(rows)


def pooled(rounds: list[dict], sizes: Sizes) -> dict:
    """The contenders' records of several rounds as one: every round's timed steps pooled (median, min and
    tokens/s over them), the highest peak memory of each process, the losses of the first round (checked
    equal in every round: same start, same batches) and each round's median apart (`round_medians_s`)."""
    out = {}
    for name in rounds[0]:
        runs = [r[name] for r in rounds if name in r]
        times = [t for run in runs for t in run["times"]]
        median = statistics.median(times)
        out[name] = {**runs[0], "times": times, "median_s": median, "min_s": min(times),
                     "tokens_per_s": sizes.tokens / median, "round_medians_s": [run["median_s"] for run in runs],
                     "peak_rss_mib": [max(peaks) for peaks in zip(*(run["peak_rss_mib"] for run in runs))]}
    return out


def main(argv=None) -> int:
    args = parse(argv)
    sizes = args.sizes
    rounds, failures = [], []
    for i in range(args.rounds):
        if args.rounds > 1:
            print(f"round {i + 1} of {args.rounds}", flush=True)
        results, notes, failed = run_all(args)
        rounds.append(results)
        failures += failed
        for name, entry in results.items():
            first = rounds[0].get(name, entry)["losses"]
            if any(abs(a - b) > 1e-6 * abs(b) for a, b in zip(entry["losses"], first)):
                failures.append(f"{name}: round {i + 1}'s losses differ from round 1's (same start, same data)")
    results = pooled(rounds, sizes)
    reference, mismatches = check_losses(results, first_loss_rtol(sizes))
    ratio = ratios(results)
    if results:
        print(table(sizes, results, ratio, reference, args.rounds))
    for name, why in notes["skipped"].items():
        print(f"{name}: skipped ({why})")
    failures += mismatches
    if args.json:
        Path(args.json).write_text(json.dumps({
            "sizes": asdict(sizes), "tokens_per_step": sizes.tokens, "cores": os.cpu_count(),
            "load_average": os.getloadavg(), "rounds": args.rounds, "reference": reference,
            "first_loss_rtol": FIRST_LOSS_RTOL, "contenders": results, "ratios": ratio, **notes,
            "failures": failures}, indent=1))
    for failure in failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
