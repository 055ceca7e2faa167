"""How compile cost grows with depth: GPT-style decoders of L = 1, 2, 4, 8, 12 blocks under four strategies.

For each depth L (examples/torch/gpt.py: token and position embeddings, L GPT-2 blocks, final layer norm, LM
head) and each strategy of `gpt.strategies` (data parallel over x=2, FSDP, Megatron over y=2, data + Megatron
on 2x2), in one process:
- import: `slicer.from_torch` (once per depth);
- partition: `slicer.compile` (tactics, propagation, partitioning, kernel graph);
- kernels: how many kernels and how many distinct ones (repeated blocks give repeated kernels), and with
  `--kernels` their native build as the ranks and the simulator do it (`compile_kernels`: one cache entry per
  distinct kernel, built in parallel), cold (an empty cache directory) and cached (the same directory again);
- op counts: linalg ops of the global (imported) program and of the partitioned one (collectives aside),
  and the collectives;
- each time's ratio to L = 1: linear growth means about L.

    python benchmarks/compile_scaling.py --json compile_scaling.json                 # small dims, ~1 min
    python benchmarks/compile_scaling.py --kernels --depths 1,12 --json ks.json      # + kernel builds
    python benchmarks/compile_scaling.py --gpt2-small --kernels                       # 12 x D=768, V=50304

`--gpt2-small` is the issue's target shape (12 layers, D=768, 12 heads, vocabulary 50304, sequence 128,
batch 4): one depth, every strategy.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "torch"))

import gpt  # noqa: E402

import slicer  # noqa: E402
from slicer.lowering import compile_kernels  # noqa: E402
from slicer.lowering.aot import split_kernels  # noqa: E402

SMALL = {"batch": 4, "seq": 8, "d_model": 32, "n_head": 4, "vocab": 64}
GPT2_SMALL = {"batch": 4, "seq": 128, "d_model": 768, "n_head": 12, "vocab": 50304}

_OP = re.compile(r"^\s*(?:%[^=]+=\s*)?\"?([a-z_]+\.[a-z_.]+)", re.M)


def op_counts(text: str) -> dict[str, int]:
    """linalg ops (yield and index aside) and collectives (shard.* and slicer.permute / all_to_all) in `text`."""
    names = _OP.findall(text)
    linalg = sum(1 for n in names if n.startswith("linalg.") and n not in ("linalg.yield", "linalg.index"))
    collectives = sum(1 for n in names if n.startswith("shard.") and n not in ("shard.grid",
                                                                               "shard.process_multi_index"))
    collectives += sum(1 for n in names if n in ("slicer.permute", "slicer.all_to_all"))
    return {"linalg": linalg, "collectives": collectives}


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def measure(depth: int, dims: dict, strategies: list[str], kernels: bool) -> dict:
    model, inputs = gpt.tiny_gpt(depth, **dims)
    imported, import_s = timed(lambda: slicer.from_torch(model, *inputs))
    row = {"depth": depth, "import_s": import_s, "global": op_counts(imported.text), "strategies": {}}
    for name in strategies:
        text, mesh = gpt.strategies(depth)[name]
        program, partition_s = timed(lambda mesh=mesh, text=text: slicer.compile(imported, mesh=mesh,
                                                                           tactics=slicer.parse_tactics(text)))
        texts = split_kernels(program.graph.kernels_mlir)
        entry = {"partition_s": partition_s, "partitioned": op_counts(program.spmd),
                 "kernels": len(texts), "distinct_kernels": len(set(texts.values()))}
        if kernels:
            with tempfile.TemporaryDirectory() as cache:
                _, cold = timed(lambda program=program: compile_kernels(program.graph.kernels_mlir, cache_dir=cache))
                _, cached = timed(lambda program=program: compile_kernels(program.graph.kernels_mlir, cache_dir=cache))
            entry.update(kernels_cold_s=cold, kernels_cached_s=cached)
        row["strategies"][name] = entry
        print(f"L={depth:2d} {name:13s} partition {partition_s:6.2f} s  linalg {row['global']['linalg']:5d} -> "
              f"{entry['partitioned']['linalg']:5d}  collectives {entry['partitioned']['collectives']:3d}  "
              f"kernels {entry['kernels']:3d} ({entry['distinct_kernels']} distinct)"
              + (f"  kernels cold {entry['kernels_cold_s']:6.2f} s cached {entry['kernels_cached_s']:.3f} s"
                 if kernels else ""), flush=True)
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", default="1,2,4,8,12", help="comma-separated numbers of blocks")
    parser.add_argument("--strategies", default=",".join(gpt.strategies(1)), help="comma-separated strategy names")
    parser.add_argument("--gpt2-small", action="store_true", help="GPT-2-small dims (12 layers unless --depths)")
    parser.add_argument("--kernels", action="store_true", help="also build the kernels, cold and cached")
    parser.add_argument("--json", type=Path, help="write the measurements here")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    dims = GPT2_SMALL if args.gpt2_small else SMALL
    depths = [int(d) for d in args.depths.split(",")] if (args.depths != "1,2,4,8,12" or not args.gpt2_small) else [12]
    strategies = args.strategies.split(",")
    rows = [measure(depth, dims, strategies, args.kernels) for depth in depths]
    base = rows[0]
    for row in rows:
        for name, entry in row["strategies"].items():
            entry["partition_ratio"] = entry["partition_s"] / base["strategies"][name]["partition_s"]
            entry["linalg_ratio"] = entry["partitioned"]["linalg"] / max(1, row["global"]["linalg"])
    print("\nratio to the first depth (partition time) and partitioned/global linalg ops:")
    for name in strategies:
        cells = "  ".join(f"L={r['depth']}: {r['strategies'][name]['partition_ratio']:.1f}x "
                          f"({r['strategies'][name]['linalg_ratio']:.2f})" for r in rows)
        print(f"  {name:13s} {cells}")
    if args.json:
        args.json.write_text(json.dumps({"dims": dims, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
