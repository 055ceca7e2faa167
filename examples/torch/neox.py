"""A GPT-NeoX-style block in PyTorch, as Hugging Face's GPTNeoX writes it: one fused QKV projection laid out per
head (`[B, S, heads, 3 * head_dim]`, cut into q, k, v by slicing the last dim), partial rotary embeddings (only
the first `rotary_pct` of each head's channels rotated: `q_rot, q_pass = q[..., :rot], q[..., rot:]`, with
rotate_half = cat(-x2, x1) of the halves of q_rot), causal attention and a parallel residual (attention and MLP
both read the block's input).

    h = x + dense(attention(rope(q), rope(k), v)) + fc2(gelu(fc1(ln2(x))))    with q, k, v from ln1(x)

Slices of slices along one dim (q of qkv, q_rot of q, the halves of q_rot): the import-time cleanup makes them
pieces of pieces (slicer/frontends/pieces.py). Parameters: ln1/ln2.weight/bias, attention.query_key_value.weight
([3D, D], rows per head) and .bias, attention.dense.weight/bias, fc1.weight/bias, fc2.weight/bias.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

#: Megatron over the heads (the fused projection's rows are per head, so its contiguous blocks are heads) and
#: the MLP's hidden units: `slicer.strategies.megatron(step, "y", **MEGATRON)`.
MEGATRON = {"column": ["attention.query_key_value.*", "fc1.*"], "row": ["attention.dense.weight", "fc2.weight"]}


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self, d_model: int, n_head: int, seq: int, rotary_pct: float):
        super().__init__()
        self.n_head, self.head_dim = n_head, d_model // n_head
        self.rot = int(self.head_dim * rotary_pct)
        self.query_key_value = nn.Linear(d_model, 3 * d_model)
        self.dense = nn.Linear(d_model, d_model)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, self.rot, 2).float() / self.rot))
        freqs = torch.outer(torch.arange(seq).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)
        self.register_buffer("mask", torch.triu(torch.ones(seq, seq, dtype=torch.bool), 1), persistent=False)

    def rope(self, t: torch.Tensor, s: int) -> torch.Tensor:
        t_rot, t_pass = t[..., :self.rot], t[..., self.rot:]
        cos, sin = self.cos[:s], self.sin[:s]
        return torch.cat((t_rot * cos + rotate_half(t_rot) * sin, t_pass), dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        hd = self.head_dim
        qkv = self.query_key_value(x).view(b, s, self.n_head, 3 * hd).permute(0, 2, 1, 3)
        q, k, v = qkv[..., :hd], qkv[..., hd:2 * hd], qkv[..., 2 * hd:]
        q, k = self.rope(q, s), self.rope(k, s)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        scores = scores.masked_fill(self.mask[:s, :s], float("-inf")).softmax(-1)
        return self.dense((scores @ v).transpose(1, 2).reshape(b, s, d))


class Block(nn.Module):
    def __init__(self, d_model: int = 32, n_head: int = 2, seq: int = 8, rotary_pct: float = 0.25):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attention = Attention(d_model, n_head, seq, rotary_pct)
        self.fc1, self.fc2 = nn.Linear(d_model, 4 * d_model), nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.attention(self.ln1(x)) + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def regression(seed: int = 0, *, batch: int = 4, seq: int = 8, d_model: int = 32, n_head: int = 2,
               rotary_pct: float = 0.25):
    """(model, loss_fn, batch): a block regressing random targets (MSE). The fused projection's bias is not
    trained: the keys' part of it has no gradient in exact arithmetic (softmax ignores what it adds to a row of
    scores), and AdamW turns the rounding noise torch and Slicer compute there into updates of up to the
    learning rate (see examples/torch/train_step.py, `freeze_attention_bias`)."""
    torch.manual_seed(seed)
    model = Block(d_model, n_head, seq, rotary_pct)
    model.attention.query_key_value.bias.requires_grad_(False)

    def loss_fn(model, x, y):
        return F.mse_loss(model(x), y)

    return model, loss_fn, (torch.randn(batch, seq, d_model), torch.randn(batch, seq, d_model))
