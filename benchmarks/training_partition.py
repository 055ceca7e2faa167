"""Training steps partitioned: the collectives per strategy, their bytes, memory per device and compile times.

A training step (forward, loss, backward through `torch.autograd.grad`, SGD update with momentum) is traced
by `torch.fx.experimental.proxy_tensor.make_fx` into one graph of aten ops and imported by `slicer.from_torch`.
The step's arguments are the batch `x` (and `target` for the GPT's cross-entropy), every parameter, then every
momentum buffer (`m_<param>`); its results are the loss, the new parameters, then the new momentum.

Models: `mlp` (2 layers), `blocks` (a stack of GPT-2 blocks on a float input, loss: mean of squares of the
output), `gpt` (token and position embeddings, blocks, final norm, LM head, cross-entropy).

Strategies (mesh x for data, y for model):
- data: the batch dim 0 over x (gradients all-reduced over x);
- zero1: data + the momentum buffers (args and results) dim 0 over x (reduce_scatter of gradients, update on
  shards, all_gather of the updated parameters);
- zero3: zero1 + the parameters (args and results) dim 0 over x (FSDP);
- megatron: attention heads (c_attn weight/bias dim 0, c_proj weight dim 1) and MLP hidden units (c_fc dim 0,
  c_proj weight dim 1) over y, for arguments and results alike;
- data_megatron: both on 2x2.

    python benchmarks/training_partition.py --model blocks --depth 1 --dims small
    python benchmarks/training_partition.py --model gpt --depth 2 --dims target --kernels --profile data

Prints, per strategy: partition time, collectives grouped by (op, axes, bytes per device), per block when the
model has blocks, the estimated peak memory per device against the unpartitioned program's, the kernels' cold
compile time (`--kernels`), and with `--check` the simulator's results against torch eager.
"""

from __future__ import annotations

import argparse
import cProfile
import collections
import math
import pstats
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

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
    """(model, batch tensors, loss function of (model output, *batch[1:])) for `kind`."""
    torch = _torch()
    from torch.nn import functional as F

    torch.manual_seed(seed)
    b, s, d = dims["batch"], dims["seq"], dims["d_model"]
    if kind == "mlp":
        model = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.Tanh(), torch.nn.Linear(4 * d, d))
        return model, (torch.randn(b * s, d),), lambda out: (out * out).mean()
    if kind == "blocks":
        from gpt2_block import GPT2Block

        model = torch.nn.Sequential(*(GPT2Block(d, dims["n_head"], max_len=s) for _ in range(depth)))
        return model, (torch.randn(b, s, d),), lambda out: (out * out).mean()
    if kind == "qkv_blocks":
        model = torch.nn.Sequential(*(SplitQKVBlock(d, dims["n_head"], s) for _ in range(depth)))
        return model, (torch.randn(b, s, d),), lambda out: (out * out).mean()
    if kind == "gpt":
        import gpt

        model = gpt.GPT(dims["vocab"], s, d, dims["n_head"], depth)
        idx = torch.randint(0, dims["vocab"], (b, s))
        target = torch.randint(0, dims["vocab"], (b, s))
        return model, (idx, target), lambda out, t: F.cross_entropy(out.reshape(-1, out.shape[-1]), t.reshape(-1))
    raise SystemExit(f"unknown model {kind!r} (mlp, blocks, gpt)")


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


def SplitQKVBlock(d, heads, max_len):  # noqa: N802 (a class factory: torch is imported lazily)
    return split_qkv_block()(d, heads, max_len)


def ident(name: str) -> str:
    """A parameter's name as a Python identifier (the traced graph's placeholder): p_blocks_0_attn_c_attn_weight."""
    return "p_" + name.replace(".", "_")


def training_step(model, batch, loss_fn):
    """(graph module, example arguments, argument names, number of parameters): the traced SGD-momentum step."""
    torch = _torch()
    from torch.fx.experimental.proxy_tensor import make_fx

    names = [n for n, _ in model.named_parameters()]
    buffers = dict(model.named_buffers())
    nb, npar = len(batch), len(names)

    def step(*args):
        inputs, params, moms = args[:nb], args[nb:nb + npar], args[nb + npar:]
        values = dict(zip(names, params))
        values.update(buffers)
        out = torch.func.functional_call(model, values, inputs[:1])
        loss = loss_fn(out, *inputs[1:])
        grads = torch.autograd.grad(loss, params)
        new_moms = [MOMENTUM * m + g for m, g in zip(moms, grads)]
        new_params = [p - LR * m for p, m in zip(params, new_moms)]
        return (loss, *new_params, *new_moms)

    params = [p.detach().clone().requires_grad_(True) for p in model.parameters()]
    moms = [torch.randn_like(p) * 0.01 for p in params]
    args = (*batch, *params, *moms)
    graph = make_fx(step)(*args)
    arg_names = (["x", "target"][:nb] + [ident(n) for n in names] + [f"m_{ident(n)[2:]}" for n in names])
    placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
    for node, name in zip(placeholders, arg_names):
        node.name = node.target = name
    graph.recompile()
    return graph, args, arg_names, names


def strategy_tactics(name: str, param_names: list[str], nb: int):
    """(tactics, mesh) of strategy `name` for a step whose results are the loss, the parameters, the momenta."""
    import slicer

    npar = len(param_names)
    tactics, mesh = [], {}
    if name in ("data", "zero1", "zero3", "data_megatron"):
        mesh["x"] = 2
        tactics.append(slicer.Tile(arg="x", dim=0, axes="x"))
        if nb > 1:
            tactics.append(slicer.Tile(arg="target", dim=0, axes="x"))
    if name in ("zero1", "zero3"):
        for i, p in enumerate(param_names):
            tactics += [slicer.Tile(arg=f"m_{ident(p)[2:]}", dim=0, axes="x"),
                        slicer.Tile(result=1 + npar + i, dim=0, axes="x")]
            if name == "zero3":
                tactics += [slicer.Tile(arg=ident(p), dim=0, axes="x"), slicer.Tile(result=1 + i, dim=0, axes="x")]
            else:
                tactics.append(slicer.Replicate(result=1 + i))
    if name in ("megatron", "data_megatron"):
        mesh["y"] = 2
        for i, p in enumerate(param_names):
            dim = megatron_dim(p)
            if dim is None:
                continue
            for target in (dict(arg=ident(p)), dict(arg=f"m_{ident(p)[2:]}"), dict(result=1 + i),
                           dict(result=1 + npar + i)):
                tactics.append(slicer.Tile(dim=dim, axes="y", **target))
    return tactics, mesh


def megatron_dim(param: str):
    """Megatron-LM's dims: column-parallel q/k/v and c_fc/fc1 (weight dim 0, bias dim 0), row-parallel
    projections (weight dim 1); for the MLP model the first layer is column- and the second row-parallel. The
    fused c_attn of gpt2_block.py stays whole (its dim 0 is Q|K|V, not heads: propagation splits its use by
    heads, its gradient is gathered)."""
    if param.endswith(("c_fc.weight", "c_fc.bias", "fc1.weight", "fc1.bias")) or param in ("0.weight", "0.bias"):
        return 0
    if any(param.endswith(f"attn.{p}.{w}") for p in "qkv" for w in ("weight", "bias")):
        return 0
    if param.endswith(("attn.c_proj.weight", "mlp.c_proj.weight", "attn.proj.weight", "fc2.weight")) \
            or param == "2.weight":
        return 1
    return None


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


def check(program, graph, args, imported) -> float:
    """Max relative error of the simulator's results against the traced step run by torch."""
    expected = [t.detach().numpy() for t in graph(*args)]
    got = program.run(*[a.detach().numpy() for a in args[:imported.num_inputs]])
    got = got if isinstance(got, (list, tuple)) else [got]
    worst = 0.0
    for e, g in zip(expected, got):
        worst = max(worst, float(np.max(np.abs(e - g)) / (np.max(np.abs(e)) + 1e-30)))
    return worst


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
    from slicer.runtime.resources import human_bytes

    model, batch, loss_fn = build_model(args.model, args.depth, DIMS[args.dims])
    start = time.perf_counter()
    graph, step_args, _, param_names = training_step(model, batch, loss_fn)
    imported = slicer.from_torch(graph, *step_args)
    print(f"{args.model} depth {args.depth} dims {args.dims}: traced and imported in "
          f"{time.perf_counter() - start:.2f} s, {len(imported.arg_names)} arguments", flush=True)
    imported = _all_inputs(imported)
    per_block = args.depth if args.model != "mlp" else 1
    for name in args.strategies.split(","):
        tactics, mesh = strategy_tactics(name, param_names, len(batch))
        profiler = cProfile.Profile() if args.profile == name else None
        start = time.perf_counter()
        if profiler:
            profiler.enable()
        program = slicer.compile(imported, mesh=mesh, tactics=tactics)
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
            print(f"   max rel. error vs torch: {check(program, graph, step_args, imported):.2e}", flush=True)
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


def _all_inputs(imported):
    """The traced step takes every tensor as an input (nothing bound): the program runs on all of them."""
    return imported


if __name__ == "__main__":
    sys.exit(main())
