"""A LLaMA-style decoder block in PyTorch, as Meta's reference code writes it: RMSNorm, rotary position
embeddings (RoPE), grouped-query attention (fewer key/value heads than query heads) and a SwiGLU MLP.

    h = x + wo(attention(rope(wq(norm(x))), rope(wk(norm(x))), wv(norm(x))));   out = h + w2(silu(w1(n)) * w3(n))

RoPE comes in the two forms real code uses (`rope=`): "complex" (Meta's LLaMA: `torch.polar` frequencies,
`view_as_complex` of pairs of channels, a complex product, `view_as_real`) and "rotate_half" (Hugging Face:
cos/sin tables and the halves of each head swapped). Both compute the same rotation of each (even, odd) or
(first half, second half) pair of channels by the position's angle.

Parameters (names as tactics use them): attention_norm.weight, attention.wq/wk/wv/wo.weight, ffn_norm.weight,
feed_forward.w1/w2/w3.weight. The input `x` is [B, S, D].
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def precompute_freqs_cis(head_dim: int, seq: int, theta: float = 10000.0) -> torch.Tensor:
    """[seq, head_dim / 2] complex64: e^(i * position * theta^(-2j / head_dim)), Meta's `precompute_freqs_cis`."""
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2)[: head_dim // 2].float() / head_dim))
    angles = torch.outer(torch.arange(seq).float(), freqs)
    return torch.polar(torch.ones_like(angles), angles)


def rope_complex(xq: torch.Tensor, xk: torch.Tensor, freqs_cis: torch.Tensor):
    """Meta's `apply_rotary_emb`: pairs of channels as complex numbers times the position's phase."""
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs = freqs_cis.view(1, xq_.shape[1], 1, xq_.shape[-1])
    xq_out = torch.view_as_real(xq_ * freqs).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_rotate_half(xq: torch.Tensor, xk: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """Hugging Face's `apply_rotary_pos_emb`: x * cos + rotate_half(x) * sin (cos, sin: [seq, head_dim])."""
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    return xq * cos + _rotate_half(xq) * sin, xk * cos + _rotate_half(xk) * sin


class Attention(nn.Module):
    def __init__(self, dim: int, n_heads: int, n_kv_heads: int, seq: int, rope: str):
        super().__init__()
        if rope not in ("complex", "rotate_half"):
            raise ValueError(f"rope must be 'complex' or 'rotate_half', not {rope!r}")
        self.n_heads, self.n_kv_heads, self.head_dim, self.rope = n_heads, n_kv_heads, dim // n_heads, rope
        self.wq = nn.Linear(dim, n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, dim, bias=False)
        freqs_cis = precompute_freqs_cis(self.head_dim, seq)
        if rope == "complex":
            self.register_buffer("freqs_cis", freqs_cis, persistent=False)
        else:
            angles = torch.cat((freqs_cis.angle(), freqs_cis.angle()), dim=-1)
            self.register_buffer("cos", angles.cos(), persistent=False)
            self.register_buffer("sin", angles.sin(), persistent=False)
        self.register_buffer("mask", torch.full((seq, seq), float("-inf")).triu(1), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        xq = self.wq(x).view(batch, seq, self.n_heads, self.head_dim)
        xk = self.wk(x).view(batch, seq, self.n_kv_heads, self.head_dim)
        xv = self.wv(x).view(batch, seq, self.n_kv_heads, self.head_dim)
        if self.rope == "complex":
            xq, xk = rope_complex(xq, xk, self.freqs_cis[:seq])
        else:
            xq, xk = rope_rotate_half(xq, xk, self.cos[:seq], self.sin[:seq])
        repeats = self.n_heads // self.n_kv_heads  # grouped-query attention: each KV head serves `repeats` heads
        keys = xk.repeat_interleave(repeats, dim=2)
        values = xv.repeat_interleave(repeats, dim=2)
        q, k, v = xq.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2)
        scores = q @ k.transpose(2, 3) / math.sqrt(self.head_dim) + self.mask[:seq, :seq]
        out = F.softmax(scores.float(), dim=-1).type_as(q) @ v
        return self.wo(out.transpose(1, 2).reshape(batch, seq, -1))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class LlamaBlock(nn.Module):
    def __init__(self, dim: int = 64, n_heads: int = 4, n_kv_heads: int = 2, seq: int = 8, hidden: int = 128,
                 rope: str = "complex"):
        super().__init__()
        self.attention_norm = RMSNorm(dim)
        self.attention = Attention(dim, n_heads, n_kv_heads, seq, rope)
        self.ffn_norm = RMSNorm(dim)
        self.feed_forward = FeedForward(dim, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


BATCH, SEQ, DIM, HEADS, KV_HEADS = 4, 8, 64, 8, 4


def llama_block(seed: int = 0, rope: str = "complex"):
    """(model, example inputs): a LLaMA block (D=64, 8 heads, 4 KV heads, SwiGLU of 128) on [4, 8, 64]."""
    torch.manual_seed(seed)
    model = LlamaBlock(DIM, HEADS, KV_HEADS, SEQ, 2 * DIM, rope=rope).eval()
    with torch.no_grad():  # RMSNorm's weights start at one; random ones check that they are applied
        for norm in (model.attention_norm, model.ffn_norm):
            norm.weight.uniform_(0.5, 1.5)
    return model, (torch.randn(BATCH, SEQ, DIM),)


MEGATRON = "attention.wo.weight.1=y;feed_forward.w1.weight.0=y;feed_forward.w3.weight.0=y;feed_forward.w2.weight.1=y"
"""Megatron for this block: heads over y (wo's input dim) and the SwiGLU's hidden units; wq/wk/wv follow by
propagation. (Sequence parallelism is not listed in models.py: with complex RoPE the complex
`freqs_cis` values are still needed across a collective, and kernels hold real and integer elements only.)"""
