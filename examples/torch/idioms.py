"""Models written the usual way, trained with `slicer.training_step` and compared with torch:

- `NanoGPT`: nanoGPT's attention, `F.scaled_dot_product_attention` (causal, or a padding mask given with the
  batch as BERT passes it, boolean or additive, broadcast [B, 1, 1, S]; an explicit `scale=`; grouped-query
  attention with `enable_gqa=True` or with the keys and values repeated by `repeat_interleave`), separate q, k, v
  projections (Megatron splits them by heads: `MEGATRON`), a gelu MLP, an LM head, cross-entropy.
- `MixtralMoE`: a Mixtral-style top-2 mixture of experts: a linear router, softmax, `torch.topk(2)`, the two
  gates renormalised, dispatch and combine as `F.one_hot` masks (or the top probabilities read back with
  `gather` and the gates written with `scatter`), stacked expert weights `[E, D, H]` applied with
  `torch.einsum` and silu (SwiGLU), and the Switch/Mixtral load-balancing loss `E * sum_e f_e * P_e` (divided
  by k) added to the task's.

    python examples/torch/idioms.py      # each model: 3 AdamW steps on the simulator against torch

Used by test/unit/frontends/test_training_idioms.py and test/mpi/test_training_idioms_mpi.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_step

import slicer
from slicer import strategies

ATTENTION = {"causal": ("causal", "scale", "gqa", "repeat_interleave"), "masked": ("bool_mask", "float_mask")}
"""`NanoGPT`s by the ways their blocks write attention (see `Attention.forward`), one block per way: the causal
ones, and those given a padding mask."""

ROUTERS = ("one_hot", "scatter_gather")
"""The ways `MixtralMoE` builds its gates (see `MixtralMoE.gates`)."""

MEGATRON = {"column": ["blocks.*.attn.q.*", "blocks.*.attn.k.*", "blocks.*.attn.v.*", "blocks.*.fc1.*"],
            "row": ["blocks.*.attn.proj.weight", "blocks.*.fc2.weight"]}
"""Megatron's split of `NanoGPT`: q, k, v by heads and fc1 by hidden units (column), proj and fc2 by input
features (row)."""


class Attention(nn.Module):
    def __init__(self, d_model: int, n_head: int, n_kv_head: int, flavor: str):
        super().__init__()
        self.n_head, self.n_kv_head, self.flavor = n_head, n_kv_head, flavor
        head = d_model // n_head
        self.q = nn.Linear(d_model, d_model)
        # No key bias: softmax ignores what it adds to a row of scores, so its gradient is rounding noise,
        # which AdamW would scale up to the learning rate (in torch and Slicer alike, differently).
        self.k = nn.Linear(d_model, n_kv_head * head, bias=False)
        self.v = nn.Linear(d_model, n_kv_head * head)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        b, s, d = x.shape
        q = self.q(x).view(b, s, self.n_head, -1).transpose(1, 2)
        k = self.k(x).view(b, s, self.n_kv_head, -1).transpose(1, 2)
        v = self.v(x).view(b, s, self.n_kv_head, -1).transpose(1, 2)
        if self.flavor == "repeat_interleave":  # LLaMA's repeat_kv, as many codebases write it
            k = k.repeat_interleave(self.n_head // self.n_kv_head, dim=1)
            v = v.repeat_interleave(self.n_head // self.n_kv_head, dim=1)
        if self.flavor == "float_mask":  # BERT's additive mask: -10000 where a key is padding
            mask = (~mask).to(q.dtype) * -10000.0
        options = {"is_causal": mask is None}
        if self.flavor == "scale":
            options["scale"] = 0.3
        if self.flavor == "gqa":
            options["enable_gqa"] = True
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **options)
        return self.proj(y.transpose(1, 2).reshape(b, s, d))


class Block(nn.Module):
    def __init__(self, d_model: int, n_head: int, n_kv_head: int, flavor: str):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = Attention(d_model, n_head, n_kv_head, flavor)
        self.fc1, self.fc2 = nn.Linear(d_model, 4 * d_model), nn.Linear(4 * d_model, d_model)

    def forward(self, x, mask=None):
        x = x + self.attn(self.ln_1(x), mask)
        return x + self.fc2(F.gelu(self.fc1(self.ln_2(x))))


class NanoGPT(nn.Module):
    """Blocks whose attention is written the ways `flavors` name (one block each: `ATTENTION`)."""

    def __init__(self, vocab: int = 32, seq: int = 8, d_model: int = 16, n_head: int = 4,
                 flavors: tuple[str, ...] = ("causal",)):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d_model), nn.Embedding(seq, d_model)
        self.blocks = nn.ModuleList(
            Block(d_model, n_head, n_head // 2 if flavor in ("gqa", "repeat_interleave") else n_head, flavor)
            for flavor in flavors)
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, idx, mask=None):
        h = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.blocks:
            h = block(h, mask)
        return self.lm_head(self.ln_f(h))


def nano_gpt(kind: str = "causal", seed: int = 0, *, batch: int = 4, seq: int = 8, vocab: int = 32, **sizes):
    """(model, loss_fn, batch): the `NanoGPT` of `ATTENTION[kind]` predicting the next token of random sequences.
    The masked kind takes a padding mask [B, 1, 1, S] with the batch, as BERT is given one (True: attend; the
    last two tokens of odd sequences are padding), which its additive block turns into -10000s."""
    torch.manual_seed(seed)
    model = NanoGPT(vocab, seq, flavors=ATTENTION[kind], **sizes)
    tokens = torch.randint(0, vocab, (batch, seq + 1))
    idx, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    if kind != "masked":
        def loss_fn(model, idx, targets):
            logits = model(idx)
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

        return model, loss_fn, (idx, targets)
    mask = torch.ones(batch, 1, 1, seq, dtype=torch.bool)
    mask[1::2, ..., -2:] = False

    def masked_loss_fn(model, idx, targets, mask):
        logits = model(idx, mask)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    return model, masked_loss_fn, (idx, targets, mask)


class MixtralMoE(nn.Module):
    """A top-k mixture of SwiGLU experts with stacked weights (w1, w3: [E, D, H], w2: [E, H, D]); every expert
    runs on every token and the gates (zero but for each token's top k) combine them."""

    def __init__(self, d_model: int = 16, hidden: int = 32, experts: int = 4, top_k: int = 2,
                 router: str = "one_hot"):
        super().__init__()
        self.experts, self.top_k, self.router_kind = experts, top_k, router
        self.router = nn.Linear(d_model, experts, bias=False)
        scale = d_model ** -0.5
        self.w1 = nn.Parameter(torch.randn(experts, d_model, hidden) * scale)
        self.w3 = nn.Parameter(torch.randn(experts, d_model, hidden) * scale)
        self.w2 = nn.Parameter(torch.randn(experts, hidden, d_model) * hidden ** -0.5)

    def gates(self, probs):
        """([T, E] gates, [T, k, E] one-hot dispatch): the top-k probabilities renormalised to sum to 1."""
        top_p, top_i = torch.topk(probs, self.top_k, dim=-1)
        if self.router_kind == "scatter_gather":  # the probabilities read back by index
            top_p = probs.gather(-1, top_i)
        top_p = top_p / top_p.sum(-1, keepdim=True)
        dispatch = F.one_hot(top_i, self.experts).to(probs.dtype)
        if self.router_kind == "scatter_gather":  # the gates written at the chosen experts
            return torch.zeros_like(probs).scatter(-1, top_i, top_p), dispatch
        return torch.einsum("tke,tk->te", dispatch, top_p), dispatch

    def forward(self, x):
        """(output like x, load-balancing loss)."""
        tokens = x.reshape(-1, x.shape[-1])
        probs = F.softmax(self.router(tokens), dim=-1)
        gates, dispatch = self.gates(probs)
        hidden = F.silu(torch.einsum("td,edh->teh", tokens, self.w1)) * torch.einsum("td,edh->teh", tokens, self.w3)
        out = torch.einsum("teh,ehd,te->td", hidden, self.w2, gates)
        load = dispatch.sum(1).mean(0)  # the fraction of tokens sent to each expert (times k)
        aux = self.experts * (load * probs.mean(0)).sum() / self.top_k
        return out.reshape(x.shape), aux


class MoEModel(nn.Module):
    """A residual MoE layer between an input projection and a regression head."""

    def __init__(self, d_model: int = 16, router: str = "one_hot", **sizes):
        super().__init__()
        self.inp = nn.Linear(d_model, d_model)
        self.moe = MixtralMoE(d_model, router=router, **sizes)
        self.head = nn.Linear(d_model, d_model)

    def forward(self, x):
        h = self.inp(x)
        y, aux = self.moe(h)
        return self.head(h + y), aux


def mixtral_moe(router: str = "one_hot", seed: int = 0, *, batch: int = 4, seq: int = 4, d_model: int = 16):
    """(model, loss_fn, batch): `MoEModel` regressing random targets, loss MSE + 0.01 * load-balancing loss."""
    torch.manual_seed(seed)
    model = MoEModel(d_model, router=router)

    def loss_fn(model, x, y):
        out, aux = model(x)
        return F.mse_loss(out, y) + 0.01 * aux

    return model, loss_fn, (torch.randn(batch, seq, d_model), torch.randn(batch, seq, d_model))


def main() -> None:
    optimizer = slicer.AdamW(0.01, betas=(0.9, 0.99), weight_decay=0.1)
    cases = [(f"nanoGPT {k}", nano_gpt(k)) for k in ATTENTION] + [(f"MoE {r}", mixtral_moe(r)) for r in ROUTERS]
    for name, (model, loss_fn, batch) in cases:
        step = slicer.training_step(model, loss_fn, *batch, optimizer=optimizer)
        prog = slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=strategies.data_parallel(step, "x"))
        loss_error, param_error = train_step.compare(model, loss_fn, batch, optimizer, prog, steps=3)
        print(f"{name}: 3 AdamW steps, data parallel on x=2: loss error {loss_error:.1e}, "
              f"parameter error {param_error:.1e}")


if __name__ == "__main__":
    main()
