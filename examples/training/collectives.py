"""The collectives of the GPT training step (model.py) per strategy and per block, with bytes and memory.

    python examples/training/collectives.py                     # tiny dims (what the lit test pins)
    python examples/training/collectives.py --dims issue        # D=256, 4 heads, vocabulary 512, sequence 64

For each strategy, the step (forward, cross-entropy, backward, AdamW) is imported with `slicer.training_step`
for a GPT of 1 and of 2 blocks and partitioned with the tactics of `slicer.strategies`; a block's collectives
are what the second block adds (2 blocks minus 1 block, by op, mesh axes and bytes received per device), the
rest belongs to the embeddings, the final norm, the LM head and the loss. Then the memory per device of the
2-block step by role against the unpartitioned step, and the partition time. test/Training/gpt_step.py pins
the tiny output with FileCheck.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
import warnings
from pathlib import Path

import torch
from mlir import ir

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model import GPT, MEGATRON, batch, loss_fn

import slicer
from slicer import strategies
from slicer.dialect import make_context
from slicer.spmd.report import report

DIMS = {"tiny": dict(vocab=16, seq=8, d_model=16, n_head=2, batch=4),
        "issue": dict(vocab=512, seq=64, d_model=256, n_head=4, batch=8)}
STRATEGIES = {
    "data": (dict(x=2), lambda s: strategies.data_parallel(s, "x")),
    "zero1": (dict(x=2), lambda s: strategies.zero(s, "x", stage=1)),
    "zero3": (dict(x=2), lambda s: strategies.zero(s, "x", stage=3)),
    "megatron": (dict(y=2), lambda s: strategies.megatron(s, "y", **MEGATRON)),
    "data+megatron": (dict(x=2, y=2),
                      lambda s: strategies.data_parallel(s, "x") + strategies.megatron(s, "y", **MEGATRON)),
}


def step_for(n_layer: int, dims: dict):
    torch.manual_seed(0)
    model = GPT(dims["vocab"], dims["seq"], dims["d_model"], dims["n_head"], n_layer)
    example = batch(torch.Generator().manual_seed(0), dims["batch"], dims["seq"], dims["vocab"])
    return slicer.training_step(model, loss_fn, *example, optimizer=slicer.AdamW(1e-3))


def collectives(prog) -> collections.Counter:
    """(op, axes, bytes received per device) -> how many, in the partitioned step."""
    with make_context():
        entries = report(ir.Module.parse(prog.spmd)).collectives
    return collections.Counter((c.op.split(".")[-1], ",".join(c.mesh_axes), c.bytes_received_per_device)
                               for c in entries)


def _lines(counts: collections.Counter) -> list[str]:
    out = []
    for (op, axes, size), n in sorted(counts.items(), key=lambda kv: (kv[0][0], kv[0][1], -kv[0][2])):
        out.append(f"{n} x {op} over [{axes}] {size} B")
    totals = collections.Counter()
    for (op, axes, _size), n in counts.items():
        totals[(op, axes)] += n
    summary = ", ".join(f"{n} {op} over [{axes}]" for (op, axes), n in sorted(totals.items())) or "none"
    return [f"({summary}; {sum(n * s for (_, _, s), n in counts.items())} B)"] + out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dims", choices=DIMS, default="tiny")
    parser.add_argument("--strategy", choices=STRATEGIES, action="append", help="default: all")
    args = parser.parse_args(argv)
    dims = DIMS[args.dims]
    warnings.simplefilter("ignore")
    steps = {n: step_for(n, dims) for n in (1, 2)}
    for name in args.strategy or STRATEGIES:
        mesh, tactics_of = STRATEGIES[name]
        counts, seconds, progs = {}, 0.0, {}
        for n, step in steps.items():
            start = time.perf_counter()
            # the partitioner's collectives, before the schedule's rewrites combine or split them
            progs[n] = slicer.compile(step, mesh=slicer.Mesh(**mesh), tactics=tactics_of(step), buckets="off",
                                      collective_matmul="off")
            seconds = time.perf_counter() - start
            counts[n] = collectives(progs[n])
        per_block = counts[2] - counts[1]
        rest = counts[1] - per_block
        print(f"strategy {name} on {slicer.Mesh(**mesh)}: 2 blocks partitioned in {seconds:.2f} s")
        print("  per block " + "\n    ".join(_lines(per_block)))
        print("  rest " + "\n    ".join(_lines(rest)))
        print("  memory per device (2 blocks):")
        for role, (mine, whole) in progs[2].memory().by_role().items():
            print(f"    {role}: {mine} B of {whole} B unpartitioned")
        print(f"    peak: {progs[2].memory().peak} B of {progs[2].memory().unpartitioned_peak} B unpartitioned")
    return 0


if __name__ == "__main__":
    sys.exit(main())
