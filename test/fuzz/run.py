"""The differential fuzzer's command line: many random cases, counts per class, shrunk reproducers.

    python test/fuzz/run.py --cases 5000 --seed 0 --jobs 2 --mpi-share 0.01 --json out.json
    python test/fuzz/run.py --replay out.json --index 17          # one case again, verbosely

A share of the cases (`--slicing-share`, default 1%) are slicing chains instead (`slicing.py`: a projection
cut by random slices, splits, unbinds and concats, forward and training step, data parallel, against torch
eager; not shrunk either). A share of the cases (`--training-share`, default 2%) are training steps instead
(`training.py`: a random MLP or convnet, loss, optimizer and strategy, with or without dropout, gradient clipping,
micro-batches and a learning-rate schedule, a few steps against torch eager); they are not shrunk (their
description is already small) and need torch and torch-mlir (without them the share is 0).

Each case (program + mesh + tactics) is compiled with `slicer.compile`, run by the simulator (and, for a
share of the cases with valid schedules, on MPI ranks) in worker subprocesses with a time limit, and
compared with the numpy reference. Failures (internal error, wrong, hang) are deduplicated by signature
and each signature's first case is shrunk (`--shrink-budget` executions); so are the clean errors met on
*valid* schedules (schedules that slicer should partition: possibly misleading rejections). Exit status:
1 if there was a failure, else 0.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `fuzz` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fuzz import regressions
from fuzz.cases import Case, generate_case
from fuzz.execute import FAILURES, KINDS
from fuzz.programs import Features
from fuzz.shrink import shrink, shrink_structure
from fuzz.slicing import SlicingCase, generate_slicing_case
from fuzz.source import RandomSource
from fuzz.training import TrainingCase, generate_training_case
from fuzz.worker import Pool


def case_seed(seed: int, index: int) -> int:
    return seed * 1_000_003 + index


def make_case(seed: int, index: int, max_ops: int = 8, features: Features = Features()) -> Case:
    s = case_seed(seed, index)
    return generate_case(RandomSource(s), seed=s, max_ops=max_ops, features=features)


def features_of(args) -> Features:
    return Features(zero_d=not getattr(args, "no_0d", False), multi_result=not getattr(args, "single_result", False),
                    return_args=not getattr(args, "single_result", False))


def wants_mpi(seed: int, index: int, case: Case, share: float) -> bool:
    return share > 0 and case.valid and random.Random(f"mpi:{seed}:{index}").random() < share


def wants_training(seed: int, index: int, share: float) -> bool:
    return share > 0 and random.Random(f"training:{seed}:{index}").random() < share


def training_available() -> bool:
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("torch", "torch_mlir"))


def wants_slicing(seed: int, index: int, share: float) -> bool:
    return share > 0 and random.Random(f"slicing:{seed}:{index}").random() < share


def make_any_case(args, index: int):
    """The case of `index`: a slicing case for a `--slicing-share` of the indices, a training case for a
    `--training-share` of the others, else a program case."""
    if wants_slicing(args.seed, index, getattr(args, "slicing_share", 0.0)):
        return generate_slicing_case(case_seed(args.seed, index))
    if wants_training(args.seed, index, getattr(args, "training_share", 0.0)):
        return generate_training_case(case_seed(args.seed, index))
    return make_case(args.seed, index, args.max_ops, features_of(args))


def wants_aot(seed: int, index: int, share: float) -> bool:
    return share > 0 and random.Random(f"aot:{seed}:{index}").random() < share


def request(case: Case | TrainingCase | SlicingCase, mpi: bool, timeout: float, aot: bool = False) -> dict:
    op = "training" if isinstance(case, TrainingCase) else "slicing" if isinstance(case, SlicingCase) else "case"
    return {"op": op, "case": case.to_json(), "mpi": mpi, "aot": aot, "mpi_timeout": max(30.0, timeout - 10)}


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--start", type=int, default=0, help="first case index")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--mpi-share", type=float, default=0.01, help="share of valid-schedule cases also run on MPI")
    ap.add_argument("--aot-share", type=float, default=0.25,
                    help="share of the cases also run by the simulator with the ranks' AOT kernels")
    ap.add_argument("--training-share", type=float, default=0.02,
                    help="share of the cases that are training steps (random MLPs and convnets vs torch)")
    ap.add_argument("--slicing-share", type=float, default=0.01,
                    help="share of the cases that are slicing chains (slice, split, unbind, cat vs torch)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per case (simulator)")
    ap.add_argument("--mpi-timeout", type=float, default=240.0, help="seconds per case run on MPI ranks")
    ap.add_argument("--max-ops", type=int, default=8)
    ap.add_argument("--no-0d", action="store_true", help="no 0-d tensors (to look behind known 0-d bugs)")
    ap.add_argument("--single-result", action="store_true",
                    help="one result, never an argument (to look behind the sibling-fusion bug)")
    ap.add_argument("--shrink-budget", type=int, default=250, help="executions per shrunk signature (0: none)")
    ap.add_argument("--no-shrink-rejections", action="store_true",
                    help="do not shrink clean errors met on valid schedules")
    ap.add_argument("--save-regressions", action="store_true",
                    help="write each shrunk failure to test/fuzz/regressions/<hash>.json")
    ap.add_argument("--json", help="write the summary, signatures, reproducers and per-case records here")
    ap.add_argument("--cache-dir", help="kernel cache for the workers (default $SLICER_CACHE_DIR or a tmp dir)")
    ap.add_argument("--replay", help="a --json file: run its case --index again and print it")
    ap.add_argument("--index", type=int)
    args = ap.parse_args(argv)
    if (args.training_share or args.slicing_share) and not training_available():
        _log("torch or torch-mlir is not installed: no training or slicing cases")
        args.training_share = args.slicing_share = 0.0

    if args.replay:
        return replay_one(args)

    t0 = time.time()
    records: list[dict] = []
    cases: dict[int, Case] = {}
    items = []
    for i in range(args.start, args.start + args.cases):
        case = make_any_case(args, i)
        cases[i] = case
        mpi = wants_mpi(args.seed, i, case, args.mpi_share)
        aot = (mpi or wants_aot(args.seed, i, args.aot_share)) and isinstance(case, Case)
        items.append((i, request(case, mpi, args.mpi_timeout if mpi else args.timeout, aot),
                      args.mpi_timeout if mpi else args.timeout))

    outcomes: dict[int, dict] = {}

    def done(i, req, out):
        outcomes[i] = out
        c = cases[i]
        records.append({"index": i, "kind": out["kind"], "stage": out["stage"], "signature": out["signature"],
                        "valid": c.valid, "mpi": req["mpi"], "aot": req["aot"], "seconds": out.get("seconds"),
                        "devices": c.devices, "training": isinstance(c, TrainingCase),
                        "slicing": isinstance(c, SlicingCase),
                        **({"dtype": c.program.dtype, "ops": len(c.program.ops)} if isinstance(c, Case) else {})})
        if out["kind"] in FAILURES or out["kind"] == "fuzzer-error":
            _log(f"[{i}] {out['kind']}: {out['signature'][:160]}")
        if len(outcomes) % 100 == 0:
            counts = Counter(o["kind"] for o in outcomes.values())
            _log(f"{len(outcomes)}/{args.cases} cases, {time.time() - t0:.0f} s: {dict(counts)}")

    with Pool(args.jobs, cache_dir=args.cache_dir) as pool:
        pool.map(items, done)
        run_seconds = time.time() - t0
        summary = summarize(cases, outcomes, items)
        print_summary(summary, run_seconds)

        # -- shrink one case per signature -----------------------------------------------------------
        by_sig: dict[str, list[int]] = defaultdict(list)
        for i in sorted(outcomes):
            by_sig[outcomes[i]["signature"]].append(i)
        to_shrink = [s for s in by_sig if outcomes[by_sig[s][0]]["kind"] in FAILURES + ("fuzzer-error",)]
        if not args.no_shrink_rejections:
            to_shrink += [s for s in by_sig if outcomes[by_sig[s][0]]["kind"] == "clean-error"
                          and any(cases[i].valid for i in by_sig[s])]
        reproducers = []
        for sig in to_shrink:
            indices = by_sig[sig]
            first = next((i for i in indices if cases[i].valid),
                         indices[0]) if outcomes[indices[0]]["kind"] == "clean-error" else indices[0]
            case, out = cases[first], outcomes[first]
            mpi = dict(items_by_index(items))[first]["mpi"]
            aot = dict(items_by_index(items))[first]["aot"]
            spent = 0
            if args.shrink_budget > 0 and isinstance(case, Case):
                _log(f"shrinking [{first}] {sig[:140]}")
                timeout = args.mpi_timeout if mpi else args.timeout
                last: dict = {}

                def still_fails(c: Case, sig=sig, mpi=mpi, aot=aot, timeout=timeout, last=last, first=first) -> bool:
                    if outcomes[first]["kind"] == "clean-error" and not c.valid:
                        return False  # a rejection is only interesting on a valid schedule
                    o = pool.request(request(c, mpi, timeout, aot), timeout)
                    if o["signature"] == sig:
                        last["outcome"] = o
                        return True
                    return False

                case, spent = shrink(case, still_fails, budget=args.shrink_budget, max_ops=args.max_ops,
                                     features=features_of(args), log=_log)
                case, more = shrink_structure(case, still_fails, budget=args.shrink_budget, log=_log)
                spent += more
                out = last.get("outcome", out)
            entry = {"signature": sig, "kind": out["kind"], "count": len(indices), "first_index": first,
                     "valid_count": sum(cases[i].valid for i in indices), "shrink_executions": spent,
                     "mpi": mpi, "case": case.to_json(), "outcome": out, "reproducer": case.reproducer()}
            if args.save_regressions and out["kind"] in FAILURES and isinstance(case, Case):
                entry["regression_file"] = str(regressions.save(case, out, mpi=mpi, aot=aot))
            reproducers.append(entry)
        print_reproducers(reproducers)

    failed = sum(summary["counts"].get(k, 0) for k in FAILURES) + summary["counts"].get("fuzzer-error", 0)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "seconds": round(time.time() - t0, 1),
                                               "run_seconds": round(run_seconds, 1), "summary": summary,
                                               "reproducers": reproducers,
                                               "records": sorted(records, key=lambda r: r["index"])}, indent=1))
        _log(f"wrote {args.json}")
    return 1 if failed else 0


def items_by_index(items):
    return [(i, req) for i, req, _ in items]


def summarize(cases: dict[int, Case], outcomes: dict[int, dict], items) -> dict:
    mpi_of = dict(items_by_index(items))
    counts = Counter(o["kind"] for o in outcomes.values())
    valid = [i for i in outcomes if cases[i].valid]
    invalid = [i for i in outcomes if not cases[i].valid]
    vcounts = Counter(outcomes[i]["kind"] for i in valid)
    icounts = Counter(outcomes[i]["kind"] for i in invalid)
    mpi = [i for i in outcomes if mpi_of[i]["mpi"]]
    aot = [i for i in outcomes if mpi_of[i]["aot"]]
    sigs: dict[str, dict] = {}
    for i in sorted(outcomes):
        o = outcomes[i]
        s = sigs.setdefault(o["signature"], {"kind": o["kind"], "count": 0, "valid": 0, "first": i})
        s["count"] += 1
        s["valid"] += cases[i].valid
    no_tactics = [i for i in outcomes if not cases[i].tactics]
    return {
        "cases": len(outcomes),
        "counts": {k: counts.get(k, 0) for k in KINDS + ("fuzzer-error",) if counts.get(k, 0) or k in KINDS},
        "valid_schedules": len(valid),
        "valid_counts": dict(vcounts),
        "valid_ok_share": round(vcounts.get("ok", 0) / len(valid), 4) if valid else None,
        "invalid_schedules": len(invalid),
        "invalid_counts": dict(icounts),
        "no_tactic_cases": len(no_tactics),
        "mpi_cases": len(mpi),
        "mpi_counts": dict(Counter(outcomes[i]["kind"] for i in mpi)),
        "aot_cases": len(aot),
        "aot_counts": dict(Counter(outcomes[i]["kind"] for i in aot)),
        "signatures": dict(sorted(sigs.items(), key=lambda kv: (kv[1]["kind"], -kv[1]["count"]))),
    }


def print_summary(s: dict, seconds: float) -> None:
    print(f"\n== {s['cases']} cases in {seconds:.0f} s")
    print("classes: " + ", ".join(f"{k} {v}" for k, v in s["counts"].items()))
    v = s["valid_schedules"]
    if v:
        print(f"valid schedules: {v} ({v / s['cases']:.0%} of cases); of these ok {s['valid_counts'].get('ok', 0)} "
              f"({s['valid_ok_share']:.1%}), " + ", ".join(f"{k} {n}" for k,
                                                           n in s["valid_counts"].items() if k != "ok"))
    if s["invalid_schedules"]:
        print(f"invalid schedules: {s['invalid_schedules']}: " +
              ", ".join(f"{k} {n}" for k, n in s["invalid_counts"].items()))
    print(f"cases without tactics: {s['no_tactic_cases']}; run on MPI ranks too: {s['mpi_cases']} "
          f"({', '.join(f'{k} {n}' for k, n in s['mpi_counts'].items())}); with the AOT kernels too: "
          f"{s['aot_cases']} ({', '.join(f'{k} {n}' for k, n in s['aot_counts'].items())})")
    print("\nsignatures (kind, count, of which valid schedules, first case):")
    for sig, d in s["signatures"].items():
        if d["kind"] == "ok":
            continue
        print(f"  {d['count']:5d} {d['valid']:5d}  [{d['first']}]  {sig[:220]}")


def print_reproducers(reproducers: list[dict]) -> None:
    for r in reproducers:
        o = r["outcome"]
        print(f"\n=== {r['kind']} x{r['count']} (valid schedules {r['valid_count']}): {r['signature'][:220]}")
        print(f"shrunk from case {r['first_index']} in {r['shrink_executions']} executions"
              f"{'; ran on MPI ranks' if r['mpi'] else ''}")
        print(r["reproducer"].rstrip())
        msg = (o.get("message") or "").strip()
        print("observed: " + (f"{o['kind']} ({o['stage']}) " if o["kind"] != "wrong" else "") + msg[:1500])
        if r.get("regression_file"):
            print(f"saved: {r['regression_file']}")


def replay_one(args) -> int:
    data = json.loads(Path(args.replay).read_text())
    records = {r["index"]: r for r in data["records"]}
    if args.index not in records:
        print(f"no case {args.index} in {args.replay}")
        return 2
    case = make_any_case(argparse.Namespace(**{"training_share": 0.0, "slicing_share": 0.0, **data["args"]}),
                         args.index)
    mpi = records[args.index]["mpi"]
    print(case.reproducer())
    timeout = args.mpi_timeout if mpi else args.timeout
    with Pool(1, cache_dir=args.cache_dir) as pool:
        out = pool.request(request(case, mpi, timeout, records[args.index].get("aot", False)), timeout)
    print(json.dumps(out, indent=1))
    return 1 if out["kind"] in FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
