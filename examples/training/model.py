"""A small GPT for the training example: token and position embeddings, pre-norm blocks with causal attention
(separate q, k, v projections, so Megatron splits them by heads) and a gelu MLP, a final norm, an LM head.

Parameters (names as tactics and strategies use them): wte.weight, wpe.weight,
blocks.<i>.ln_1.weight/bias, blocks.<i>.attn.{q,k,v,proj}.weight/bias, blocks.<i>.ln_2.weight/bias,
blocks.<i>.mlp.{fc1,fc2}.weight/bias, ln_f.weight/bias, lm_head.weight.

The task (`batch`): the second half of each sequence is the first half reversed; the model is trained to
predict it (the loss counts the second half only), which it can learn since it sees the first half.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


class Attention(nn.Module):
    def __init__(self, d_model: int, n_head: int, seq: int):
        super().__init__()
        self.n_head = n_head
        self.q, self.k, self.v = (nn.Linear(d_model, d_model) for _ in range(3))
        self.proj = nn.Linear(d_model, d_model)
        self.register_buffer("mask", torch.triu(torch.ones(seq, seq, dtype=torch.bool), diagonal=1))

    def forward(self, x):
        b, s, d = x.shape
        heads = lambda t: t.view(b, s, self.n_head, d // self.n_head).transpose(1, 2)  # noqa: E731
        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.n_head)
        scores = scores.masked_fill(self.mask[:s, :s], float("-inf"))
        return self.proj((F.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, s, d))


class Block(nn.Module):
    def __init__(self, d_model: int, n_head: int, seq: int):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = Attention(d_model, n_head, seq)
        self.mlp = nn.Sequential()
        self.mlp.fc1 = nn.Linear(d_model, 4 * d_model)
        self.mlp.act = nn.GELU(approximate="tanh")
        self.mlp.fc2 = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int = 16, seq: int = 16, d_model: int = 32, n_head: int = 4, n_layer: int = 2):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d_model), nn.Embedding(seq, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_head, seq) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, idx):
        h = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.blocks:
            h = block(h)
        return self.lm_head(self.ln_f(h))


def loss_fn(model, idx, targets):
    """Cross-entropy of the second half's predictions (positions S/2-1 .. S-2 predict tokens S/2 .. S-1)."""
    half = idx.shape[1] // 2
    logits = model(idx)[:, half - 1:-1]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets[:, half:].reshape(-1))


def batch(generator: torch.Generator, size: int, seq: int, vocab: int):
    """(idx, targets): random first halves, the second halves their reverse; targets = idx."""
    first = torch.randint(0, vocab, (size, seq // 2), generator=generator)
    idx = torch.cat([first, first.flip(1)], dim=1)
    return idx, idx.clone()


MEGATRON = {"column": ["blocks.*.attn.q.*", "blocks.*.attn.k.*", "blocks.*.attn.v.*", "blocks.*.mlp.fc1.*"],
            "row": ["blocks.*.attn.proj.weight", "blocks.*.mlp.fc2.weight"]}
"""Megatron-LM's split of a block: q, k, v and fc1 by output features (heads, hidden units: column parallel),
proj and fc2 by input features (row parallel): one all_reduce after attention and one after the MLP."""
