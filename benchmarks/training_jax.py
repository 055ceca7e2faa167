"""The JAX contender of `training.py`: the GPT of examples/training/model.py ported to JAX, its training step
(loss, gradients, AdamW as torch computes it) under `jax.jit` on 2 CPU devices of one process.

    python benchmarks/training_jax.py data|fsdp|megatron SIZES_JSON OUT
    python benchmarks/training_jax.py data,fsdp,megatron SIZES_JSON OUT    # one process for all (`--small`)

The port starts from the torch model's own initial parameters (`build_model`, copied as numpy arrays) and
keeps its layout (a linear's weight is [out, in]), so the shardings read as Slicer's strategies do:
- data: parameters and optimizer state replicated, the batch split by rows over x;
- fsdp: every parameter (and its Adam moments) split along dim 0 over x where 2 divides it, the batch too;
- megatron: q, k, v and fc1 split by output features, proj and fc2 weights by input features over y
  (`model.MEGATRON`), the rest and the batch replicated.
`jit` gets those as in/out shardings (the state donated, as a user would); XLA inserts the collectives. The
step's time is the wall time of the call and `float(loss)`, the batch handed over as numpy arrays each step.
"""

from __future__ import annotations

import fnmatch
import math
import os
import sys
import time
from pathlib import Path

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip()

sys.path.insert(0, str(Path(__file__).resolve().parent))
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from training_common import ADAMW, Sizes, batches, build_model, example_module, peak_rss_mib, record, write


def _layer_norm(x, p, name):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + 1e-5) * p[f"{name}.weight"] + p[f"{name}.bias"]


def _linear(x, p, name, bias=True):
    y = x @ p[f"{name}.weight"].T
    return y + p[f"{name}.bias"] if bias else y


def _attention(x, p, name, n_head):
    b, s, d = x.shape
    heads = lambda t: t.reshape(b, s, n_head, d // n_head).transpose(0, 2, 1, 3)  # noqa: E731
    q, k, v = (heads(_linear(x, p, f"{name}.{w}")) for w in "qkv")
    scores = (q @ k.transpose(0, 1, 3, 2)) / math.sqrt(d // n_head)
    mask = jnp.triu(jnp.ones((s, s), dtype=bool), k=1)
    scores = jnp.where(mask, -jnp.inf, scores)
    out = (jax.nn.softmax(scores, axis=-1) @ v).transpose(0, 2, 1, 3).reshape(b, s, d)
    return _linear(out, p, f"{name}.proj")


def forward(p, idx, sizes: Sizes):
    """The logits of model.GPT for `idx` (int32 [B, S])."""
    h = p["wte.weight"][idx] + p["wpe.weight"][jnp.arange(idx.shape[1])]
    for i in range(sizes.n_layer):
        name = f"blocks.{i}"
        h = h + _attention(_layer_norm(h, p, f"{name}.ln_1"), p, f"{name}.attn", sizes.n_head)
        hidden = jax.nn.gelu(_linear(_layer_norm(h, p, f"{name}.ln_2"), p, f"{name}.mlp.fc1"), approximate=True)
        h = h + _linear(hidden, p, f"{name}.mlp.fc2")
    return _linear(_layer_norm(h, p, "ln_f"), p, "lm_head", bias=False)


def loss_fn(p, idx, targets, sizes: Sizes):
    """model.loss_fn: cross-entropy of the second half's predictions."""
    half = idx.shape[1] // 2
    logits = forward(p, idx, sizes)[:, half - 1:-1]
    logp = jax.nn.log_softmax(logits, axis=-1)
    picked = jnp.take_along_axis(logp, targets[:, half:, None], axis=-1)
    return -picked.mean()


def adamw(p, g, m, v, t):
    """torch.optim.AdamW's update (decoupled weight decay, bias corrections) at step `t` (1-based)."""
    lr, (b1, b2), eps, wd = ADAMW["lr"], ADAMW["betas"], ADAMW["eps"], ADAMW["weight_decay"]
    p = p * (1 - lr * wd)
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    denom = jnp.sqrt(v) / jnp.sqrt(1 - b2 ** t) + eps
    return p - (lr / (1 - b1 ** t)) * m / denom, m, v


def make_step(sizes: Sizes):
    def step(params, m, v, t, idx, targets):
        loss, grads = jax.value_and_grad(loss_fn)(params, idx, targets, sizes)
        updated = {k: adamw(params[k], grads[k], m[k], v[k], t) for k in params}
        return (loss, {k: u[0] for k, u in updated.items()}, {k: u[1] for k, u in updated.items()},
                {k: u[2] for k, u in updated.items()})

    return step


def specs(strategy: str, params: dict) -> tuple[str, dict, P]:
    """The mesh axis, each parameter's PartitionSpec and the batch's, for `strategy`."""
    if strategy == "data":
        return "x", {k: P() for k in params}, P("x", None)
    if strategy == "fsdp":
        return "x", {k: P("x") if a.shape[0] % 2 == 0 else P() for k, a in params.items()}, P("x", None)
    if strategy != "megatron":
        raise SystemExit(f"unknown JAX strategy {strategy!r}: data, fsdp or megatron")
    split = example_module().MEGATRON
    out = {}
    for k, a in params.items():
        if any(fnmatch.fnmatch(k, pattern) for pattern in split["column"]):
            out[k] = P("y", None) if a.ndim == 2 else P("y")
        elif any(fnmatch.fnmatch(k, pattern) for pattern in split["row"]):
            out[k] = P(None, "y")
        else:
            out[k] = P()
    return "y", out, P()


def run(strategy: str, sizes: Sizes, shared: bool) -> dict:
    """Train with `strategy`'s shardings; the contender's record (`shared`: other strategies ran in this
    process too, so its peak memory is theirs as well)."""
    model = build_model(sizes)
    params = {k: t.detach().numpy().copy() for k, t in model.named_parameters()}
    axis, param_specs, batch_spec = specs(strategy, params)
    mesh = Mesh(np.array(jax.devices()[:2]), (axis,))
    shard = {k: NamedSharding(mesh, s) for k, s in param_specs.items()}
    batch_sharding, replicated = NamedSharding(mesh, batch_spec), NamedSharding(mesh, P())
    step = jax.jit(make_step(sizes), donate_argnums=(0, 1, 2),
                   in_shardings=(shard, shard, shard, replicated, batch_sharding, batch_sharding),
                   out_shardings=(replicated, shard, shard, shard))
    p = {k: jax.device_put(a, shard[k]) for k, a in params.items()}
    m = {k: jax.device_put(np.zeros_like(a), shard[k]) for k, a in params.items()}
    v = {k: jax.device_put(np.zeros_like(a), shard[k]) for k, a in params.items()}
    times, losses = [], []
    for t, (idx, targets) in enumerate(batches(sizes), start=1):
        idx, targets = idx.numpy().astype(np.int32), targets.numpy().astype(np.int32)
        start = time.perf_counter()
        loss, p, m, v = step(p, m, v, np.float32(t), idx, targets)
        value = float(loss)
        times.append(time.perf_counter() - start)
        losses.append(value)
    return record(f"jax_{strategy}", sizes, times, losses, [peak_rss_mib()], processes=1, devices=2,
                  jax=jax.__version__, shared_process=shared)


def main(argv: list[str]) -> None:
    names, sizes = argv[0].split(","), Sizes.from_json(argv[1])
    write(argv[2], {"results": {f"jax_{name}": run(name, sizes, len(names) > 1) for name in names}})


if __name__ == "__main__":
    main(sys.argv[1:])
