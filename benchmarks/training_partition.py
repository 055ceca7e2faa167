"""Training steps partitioned: the collectives per strategy, their bytes, memory per device and compile times.

A training step (forward, loss, gradients, SGD update with momentum) is imported by `slicer.training_step`
and partitioned with `slicer.strategies`: its arguments are the batch (`x`, or `idx` and `targets` for the
GPT), every parameter, then every momentum buffer (`momentum.<param>`); its results are the loss and the next
parameters and momenta under the same names.

Models: `mlp` (2 layers), `blocks` (a stack of GPT-2 blocks with a fused QKV projection on a float input, loss:
mean of squares of the output), `qkv_blocks` (the same with separate q/k/v linears), `gpt` (token and position
embeddings, blocks, final norm, LM head, cross-entropy).

Strategies (mesh x for data, y for model), each a `slicer.strategies` helper:
- data: `data_parallel` over x (gradients all-reduced over x);
- zero1: `zero(stage=1)`: data + the momentum buffers split over x (reduce_scatter of gradients, update on
  shards, all_gather of the updated parameters);
- zero3: `zero(stage=3)`: zero1 + the parameters split over x (FSDP);
- megatron: `megatron` over y: attention heads (q/k/v, or the fused c_attn left whole) and MLP hidden units
  column-parallel, the output projections row-parallel;
- data_megatron: both on 2x2.

    python benchmarks/training_partition.py --model blocks --depth 1 --dims small
    python benchmarks/training_partition.py --model gpt --depth 2 --dims target --kernels --profile data

Prints, per strategy: partition time, collectives grouped by (op, axes, bytes per device), per block when the
model has blocks, the estimated peak memory per device against the unpartitioned program's, the kernels' cold
compile time (`--kernels`), and with `--check` 3 steps on the simulator against torch eager.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import math
import pstats
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "torch"))

DIMS = {
    "small": {"batch": 4, "seq": 8, "d_model": 32, "n_head": 4, "vocab": 64},
    "target": {"batch": 4, "seq": 64, "d_model": 256, "n_head": 4, "vocab": 512},
}
LR, MOMENTUM = 0.1, 0.9
STRATEGIES = ("data", "zero1", "zero3", "megatron", "data_megatron")


def _torch():
    import torch  # benchmark-only dependency

    return torch


def build_model(kind: str, depth: int, dims: dict, seed: int = 0):
    """(model, batch tensors, loss function of (model, *batch)) for `kind`."""
    torch = _torch()
    from torch.nn import functional as F

    torch.manual_seed(seed)
    b, s, d = dims["batch"], dims["seq"], dims["d_model"]
    if kind == "mlp":
        model = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.Tanh(), torch.nn.Linear(4 * d, d))
        return model, (torch.randn(b * s, d),), _mean_square
    if kind == "blocks":
        from gpt2_block import GPT2Block

        model = torch.nn.Sequential(*(GPT2Block(d, dims["n_head"], max_len=s) for _ in range(depth)))
        return model, (torch.randn(b, s, d),), _mean_square
    if kind == "qkv_blocks":
        model = torch.nn.Sequential(*(SplitQKVBlock(d, dims["n_head"], s) for _ in range(depth)))
        return model, (torch.randn(b, s, d),), _mean_square
    if kind == "gpt":
        import gpt

        model = gpt.GPT(dims["vocab"], s, d, dims["n_head"], depth)
        idx = torch.randint(0, dims["vocab"], (b, s))
        target = torch.randint(0, dims["vocab"], (b, s))

        def cross_entropy(model, idx, targets):
            logits = model(idx)
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

        return model, (idx, target), cross_entropy
    raise SystemExit(f"unknown model {kind!r} (mlp, blocks, qkv_blocks, gpt)")


def _mean_square(model, x):
    out = model(x)
    return (out * out).mean()


def split_qkv_block():
    """A pre-norm causal transformer block whose Q, K and V are separate linears (attn.q/k/v, attn.proj; MLP
    mlp.fc1, mlp.fc2): Megatron tiles q/k/v weights dim 0 and proj dim 1, so the three input gradients
    dq Wq + dk Wk + dv Wv are partial sums over the same axis."""
    torch = _torch()
    from torch.nn import functional as F

    class Attention(torch.nn.Module):
        def __init__(self, d, heads, max_len):
            super().__init__()
            self.heads = heads
            self.register_buffer("mask", torch.triu(torch.ones(max_len, max_len, dtype=torch.bool), diagonal=1))
            self.q, self.k, self.v, self.proj = (torch.nn.Linear(d, d) for _ in range(4))

        def forward(self, x):
            b, s, d = x.shape
            split = lambda t: t.view(b, s, self.heads, d // self.heads).transpose(1, 2)  # noqa: E731
            q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
            scores = scores.masked_fill(self.mask[:s, :s], float("-inf"))
            out = F.softmax(scores, dim=-1) @ v
            return self.proj(out.transpose(1, 2).reshape(b, s, d))

    class Block(torch.nn.Module):
        def __init__(self, d, heads, max_len):
            super().__init__()
            self.ln_1, self.ln_2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
            self.attn = Attention(d, heads, max_len)
            self.mlp = torch.nn.Sequential()
            self.mlp.add_module("fc1", torch.nn.Linear(d, 4 * d))
            self.mlp.add_module("act", torch.nn.GELU(approximate="tanh"))
            self.mlp.add_module("fc2", torch.nn.Linear(4 * d, d))

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    return Block


def SplitQKVBlock(d, heads, max_len):
    return split_qkv_block()(d, heads, max_len)


# Megatron-LM's split per model (`slicer.strategies.megatron` patterns): column-parallel q/k/v and the MLP's first
# linear (weight and bias by output features), row-parallel output projections (weight by input features). The
# fused c_attn of gpt2_block.py stays whole (its dim 0 is Q|K|V, not heads): propagation splits its use by heads.
MEGATRON = {
    "mlp": {"column": ["0.*"], "row": ["2.weight"]},
    "blocks": {"column": ["*mlp.c_fc.*"], "row": ["*attn.c_proj.weight", "*mlp.c_proj.weight"]},
    "qkv_blocks": {"column": ["*attn.q.*", "*attn.k.*", "*attn.v.*", "*mlp.fc1.*"],
                   "row": ["*attn.proj.weight", "*mlp.fc2.weight"]},
}
MEGATRON["gpt"] = MEGATRON["blocks"]


def training_step(model, batch, loss_fn):
    """The SGD-momentum training step of `model`, imported by `slicer.training_step`."""
    import slicer

    return slicer.training_step(model, loss_fn, *batch, optimizer=optimizer())


def optimizer():
    """SGD with momentum (slicer.SGD; torch.optim.SGD's numerics)."""
    import slicer

    return slicer.SGD(LR, momentum=MOMENTUM)


def strategy_tactics(name: str, step, model_kind: str):
    """(tactics, mesh) of strategy `name` for the imported training step `step` of a `model_kind` model."""
    from slicer import strategies as st

    if name == "data":
        return st.data_parallel(step, "x"), {"x": 2}
    if name in ("zero1", "zero3"):
        return st.zero(step, "x", stage=int(name[-1])), {"x": 2}
    megatron = st.megatron(step, "y", **MEGATRON[model_kind])
    if name == "megatron":
        return megatron, {"y": 2}
    if name == "data_megatron":
        return st.data_parallel(step, "x") + megatron, {"x": 2, "y": 2}
    raise SystemExit(f"unknown strategy {name!r} ({', '.join(STRATEGIES)})")


def collectives_by_kind(program, depth: int) -> tuple[list[str], int]:
    """Lines '<count> x <op> over <axes> <bytes> B' (per block when depth > 1: counts divided by depth) and total."""
    from mlir import ir

    from slicer.dialect import make_context
    from slicer.spmd import report

    with make_context():
        rep = report(ir.Module.parse(program.spmd))
    kinds = collections.Counter((c.op.split(".")[-1], ",".join(c.mesh_axes), c.bytes_received_per_device)
                                for c in rep.collectives)
    lines = [f"{n:3d} x {op} over [{axes}] {b} B" for (op, axes, b), n in sorted(kinds.items())]
    return lines, rep.bytes_received_per_device


def check(program, model, loss_fn, batch) -> float:
    """Largest relative error of 3 steps on the simulator (losses and final parameters) against torch eager."""
    import train_step

    return max(train_step.compare(model, loss_fn, batch, optimizer(), program, steps=3))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="blocks", choices=("mlp", "blocks", "qkv_blocks", "gpt"))
    parser.add_argument("--depth", type=int, default=1)
    parser.add_argument("--dims", default="small", choices=tuple(DIMS))
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--kernels", action="store_true", help="compile the kernels cold (empty cache dir)")
    parser.add_argument("--check", action="store_true", help="compare the simulator's results with torch")
    parser.add_argument("--profile", help="cProfile this strategy's slicer.compile; print the top functions")
    parser.add_argument("--show", help="print this strategy's collectives report")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    import slicer
    from slicer.lowering import compile_kernels
    from slicer.runtime.jobs.resources import human_bytes

    model, batch, loss_fn = build_model(args.model, args.depth, DIMS[args.dims])
    start = time.perf_counter()
    imported = training_step(model, batch, loss_fn)
    print(f"{args.model} depth {args.depth} dims {args.dims}: traced and imported in "
          f"{time.perf_counter() - start:.2f} s, {len(imported.arg_names)} arguments", flush=True)
    per_block = args.depth if args.model != "mlp" else 1
    for name in args.strategies.split(","):
        tactics, mesh = strategy_tactics(name, imported, args.model)
        profiler = cProfile.Profile() if args.profile == name else None
        start = time.perf_counter()
        if profiler:
            profiler.enable()
        program = slicer.compile(imported, mesh=slicer.Mesh(**mesh), tactics=tactics)
        if profiler:
            profiler.disable()
        partition_s = time.perf_counter() - start
        lines, total = collectives_by_kind(program, per_block)
        memory = program.memory()
        print(f"== {name} on {mesh}: partition {partition_s:.2f} s; memory per device {human_bytes(memory.peak)} "
              f"(unpartitioned {human_bytes(memory.unpartitioned_peak)}); {total} B received per device in all"
              f"{f' ({per_block} blocks)' if per_block > 1 else ''}", flush=True)
        for line in lines:
            print("   " + line)
        if args.kernels:
            with tempfile.TemporaryDirectory() as cache:
                start = time.perf_counter()
                compile_kernels(program.graph.kernels_mlir, cache_dir=cache)
                print(f"   kernels cold {time.perf_counter() - start:.2f} s", flush=True)
        if args.check:
            print(f"   max rel. error vs torch (3 steps): {check(program, model, loss_fn, batch):.2e}", flush=True)
        if args.show == name:
            from mlir import ir

            from slicer.dialect import make_context
            from slicer.spmd import report

            with make_context():
                print(report(ir.Module.parse(program.spmd)).text())
        if profiler:
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(40)
            pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
