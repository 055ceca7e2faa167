"""A GPT-2-style transformer block in PyTorch: pre-norm, causal multi-head attention with a fused QKV
projection, a tanh-gelu MLP, residuals (the layout of GPT-2 / nanoGPT).

    x = x + attn(ln_1(x));   x = x + mlp(ln_2(x))

Parameters (names as tactics use them): ln_1.weight/bias, attn.c_attn.weight/bias ([3D, D] / [3D]: Q, K and V
stacked), attn.c_proj.weight/bias ([D, D]), ln_2.weight/bias, mlp.c_fc.weight/bias ([4D, D] / [4D]),
mlp.c_proj.weight/bias ([D, 4D]); buffer attn.mask ([S, S] booleans, True above the diagonal: masked).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_head: int, max_len: int):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(d_model, 3 * d_model)
        self.c_proj = nn.Linear(d_model, d_model)
        self.register_buffer("mask", torch.triu(torch.ones(max_len, max_len, dtype=torch.bool), diagonal=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, d_model = x.shape
        q, k, v = self.c_attn(x).split(d_model, dim=2)
        heads = lambda t: t.view(batch, seq, self.n_head, d_model // self.n_head).transpose(1, 2)  # noqa: E731
        q, k, v = heads(q), heads(k), heads(v)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d_model // self.n_head)
        scores = scores.masked_fill(self.mask[:seq, :seq], float("-inf"))
        out = F.softmax(scores, dim=-1) @ v
        return self.c_proj(out.transpose(1, 2).reshape(batch, seq, d_model))


class MLP(nn.Module):
    def __init__(self, d_model: int):
        super().__init__()
        self.c_fc = nn.Linear(d_model, 4 * d_model)
        self.c_proj = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class GPT2Block(nn.Module):
    def __init__(self, d_model: int = 64, n_head: int = 4, max_len: int = 16):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_head, max_len)
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))
