"""Import, partition and compile PyTorch blocks: how long from a torch.nn.Module to a partitioned program.

For each model of examples/torch (a GPT-2 block, torch's nn.TransformerEncoderLayer), side by side in one
process, repetitions interleaved:
- import: `slicer.from_torch` (torch.export + torch-mlir + Slicer's cleanup), next to the same import without
  the cleanup (`cleanup=False`: what torch-mlir alone costs); the first import in the process separately
  (torch.export's warm-up);
- compile: `slicer.compile` per strategy (tactics, propagation, partitioning, kernel graph) on a mesh of 4,
  and its propagation next to the reference engine that asks every op at every step (`incremental=False`);
- with `--kernels`: the native kernel build of the Megatron program (`compile_library`, empty cache), which
  `Program.run` does once per program (cached by content hash).

Times are medians of `--reps` runs, wall clock and this process's CPU time (the machine is shared: CPU time is
the steadier of the two).

    python benchmarks/import_compile.py --json import_compile.json       # ~1 min
    python benchmarks/import_compile.py --kernels                        # + kernel builds (~1 min more)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "torch"))

import models  # noqa: E402

import slicer  # noqa: E402
from slicer.dialect import make_context, parse_source  # noqa: E402
from slicer.lowering import compile_library  # noqa: E402
from slicer.propagation.engine import propagate_module  # noqa: E402


def timed(fn):
    """(result, wall seconds, CPU seconds of this process)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def propagation_only(imported, tactics, mesh, incremental: bool):
    with make_context():
        module = parse_source(imported.text, "bench")
        slicer.apply_tactics(module, tactics, mesh=mesh)
        return timed(lambda: propagate_module(module, incremental=incremental))[1:]


def median(values):
    return statistics.median(values) if values else float("nan")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--json", type=Path, help="write the measurements here")
    parser.add_argument("--kernels", action="store_true", help="also build the Megatron program's kernels")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    results = {"reps": args.reps, "models": {}}
    first = None
    for name, build in models.MODELS.items():
        model, inputs = build()
        if first is None:
            _, wall, cpu = timed(lambda model=model, inputs=inputs: slicer.from_torch(model, *inputs))
            first = results["first_import"] = {"model": name, "wall": wall, "cpu": cpu}
        rows = {key: [] for key in ("import", "import_no_cleanup")}
        strategies = models.STRATEGIES[name]
        compile_rows = {s: [] for s in strategies}
        propagate_rows = {s: {"incremental": [], "reference": []} for s in strategies}
        for _ in range(args.reps):
            imported, wall, cpu = timed(lambda model=model, inputs=inputs: slicer.from_torch(model, *inputs))
            rows["import"].append((wall, cpu))
            _, wall, cpu = timed(lambda model=model, inputs=inputs: slicer.from_torch(model, *inputs, cleanup=False))
            rows["import_no_cleanup"].append((wall, cpu))
            for strategy, (tactics, axis) in strategies.items():
                mesh, parsed = slicer.Mesh(**{axis: 4}), slicer.parse_tactics(tactics)
                prog, wall, cpu = timed(lambda imported=imported, mesh=mesh, parsed=parsed: slicer.compile(
                    imported, mesh=mesh, tactics=parsed))
                compile_rows[strategy].append((wall, cpu))
                for engine in ("incremental", "reference"):
                    propagate_rows[strategy][engine].append(
                        propagation_only(imported, parsed, mesh, engine == "incremental"))
        entry = {key: {"wall": median([w for w, _ in v]), "cpu": median([c for _, c in v])} for key, v in rows.items()}
        entry["compile"] = {s: {"wall": median([w for w, _ in v]), "cpu": median([c for _, c in v])}
                            for s, v in compile_rows.items()}
        entry["propagate"] = {s: {e: {"wall": median([w for w, _ in v]), "cpu": median([c for _, c in v])}
                                  for e, v in engines.items()} for s, engines in propagate_rows.items()}
        entry["import_and_megatron_compile"] = {k: entry["import"][k] + entry["compile"]["megatron"][k]
                                                for k in ("wall", "cpu")}
        if args.kernels:
            tactics, axis = strategies["megatron"]
            prog = slicer.compile(imported, mesh=slicer.Mesh(**{axis: 4}), tactics=slicer.parse_tactics(tactics))
            with tempfile.TemporaryDirectory() as cache:
                library, wall, cpu = timed(lambda prog=prog, cache=cache: compile_library(prog.graph.kernels_mlir,
                                                                                         cache_dir=cache))
                ll = sum(f.stat().st_size for f in Path(cache).rglob("kernels.ll"))
            entry["kernel_build_megatron"] = {"wall": wall, "cpu_python": cpu, "kernels": len(library),
                                              "steps": library.meta.get("timings", {}), "llvm_ir_bytes": ll}
            entry["import_compile_kernels_megatron"] = entry["import_and_megatron_compile"]["wall"] + wall
        results["models"][name] = entry

    print(f"median of {args.reps}; wall s (CPU s of this process)")
    print(f"first import in the process ({first['model']}, torch.export warm-up): {first['wall']:.2f} "
          f"({first['cpu']:.2f})")
    print("| model | import | import without cleanup | compile megatron | compile sequence | compile data | "
          "import + megatron compile |")
    print("|---|---|---|---|---|---|---|")
    fmt = lambda d: f"{d['wall']:.2f} ({d['cpu']:.2f})"  # noqa: E731
    for name, e in results["models"].items():
        c = e["compile"]
        print(f"| {name} | {fmt(e['import'])} | {fmt(e['import_no_cleanup'])} | {fmt(c['megatron'])} | "
              f"{fmt(c['sequence'])} | {fmt(c['data'])} | {fmt(e['import_and_megatron_compile'])} |")
    print()
    print("| model | strategy | propagation: worklist | asking every op (reference) | speedup (CPU) |")
    print("|---|---|---|---|---|")
    for name, e in results["models"].items():
        for strategy, p in e["propagate"].items():
            inc, ref = p["incremental"], p["reference"]
            print(f"| {name} | {strategy} | {fmt(inc)} | {fmt(ref)} | {ref['cpu'] / inc['cpu']:.1f}x |")
    if args.kernels:
        print()
        for name, e in results["models"].items():
            k = e["kernel_build_megatron"]
            steps = ", ".join(f"{step} {seconds:.2f}" for step, seconds in k["steps"].items())
            print(f"kernel build, {name} megatron ({k['kernels']} kernels, empty cache): {k['wall']:.2f} s wall "
                  f"({steps}; LLVM IR {k['llvm_ir_bytes'] / 1e6:.1f} MB); import + compile + kernels: "
                  f"{e['import_compile_kernels_megatron']:.2f} s wall")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
