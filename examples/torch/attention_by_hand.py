"""Attention written by hand, as nanoGPT's slow path writes it, for context parallelism by heads
(`slicer.strategies.context_parallel(..., method="all_to_all")`, DeepSpeed-Ulysses): one block whose fused qkv
projection is split in three, its scores softmax(q k^T / sqrt(d) + mask) v with an additive padding mask
[B, 1, 1, S] or causal by `masked_fill` of a lower-triangular buffer; a next-token loss and a batch.

    python examples/torch/attention_by_hand.py     # 3 AdamW steps under Ulysses on x=2 (the simulator) vs torch

Used by test/unit/frontends/test_context_heads.py and test/mpi/test_context_heads_mpi.py.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_step

import slicer
from slicer import strategies


class HandWritten(nn.Module):
    """One attention block as nanoGPT's slow path writes it (a fused qkv projection split in three), its scores
    softmax(q k^T / sqrt(d) + mask) with an additive padding mask [B, 1, 1, S], or causal by `masked_fill`."""

    def __init__(self, vocab: int = 32, seq: int = 8, d_model: int = 24, n_head: int = 4, causal: bool = False):
        super().__init__()
        self.n_head, self.causal = n_head, causal
        self.wte, self.wpe = nn.Embedding(vocab, d_model), nn.Embedding(seq, d_model)
        # No qkv bias: the keys' part has no gradient in exact arithmetic (softmax ignores what it adds to a row of
        # scores), and AdamW would scale its rounding noise up to the learning rate (train_step.freeze_attention_bias)
        self.qkv, self.proj = nn.Linear(d_model, 3 * d_model, bias=False), nn.Linear(d_model, d_model)
        self.ln, self.head = nn.LayerNorm(d_model), nn.Linear(d_model, vocab, bias=False)
        self.register_buffer("bias", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))

    def forward(self, idx, mask=None):
        b, s = idx.shape
        h = self.wte(idx) + self.wpe(torch.arange(s))
        q, k, v = (t.view(b, s, self.n_head, -1).transpose(1, 2) for t in self.qkv(h).split(h.shape[-1], dim=2))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.shape[-1]))
        if self.causal:
            att = att.masked_fill(self.bias[:, :, :s, :s] == 0, float("-inf"))
        if mask is not None:
            att = att + mask
        y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).contiguous().view(b, s, -1)
        return self.head(self.ln(h + self.proj(y)))


def lm_loss(m, idx, targets):
    return F.cross_entropy(m(idx).flatten(0, 1), targets.flatten())


def masked_loss(m, idx, targets, mask):
    return F.cross_entropy(m(idx, mask).flatten(0, 1), targets.flatten())


def tokens(batch: int, seq: int = 8, vocab: int = 32):
    data = torch.randint(0, vocab, (batch, seq + 1))
    return data[:, :-1].contiguous(), data[:, 1:].contiguous()


def padded(seed: int = 0, batch: int = 1, seq: int = 8, padding: int = 3):
    """(model, loss_fn, (idx, targets, mask)): `HandWritten` with its last `padding` keys masked (-10000)."""
    torch.manual_seed(seed)
    model, (idx, targets) = HandWritten(seq=seq), tokens(batch, seq)
    mask = torch.zeros(batch, 1, 1, seq)
    mask[..., seq - padding:] = -10000.0
    return model, masked_loss, (idx, targets, mask)


def main() -> None:
    model, loss_fn, batch = padded()
    optimizer = slicer.AdamW(0.01)
    step = slicer.training_step(model, loss_fn, *batch, optimizer=optimizer)
    prog = slicer.compile(step, mesh=slicer.Mesh(x=2),
                          tactics=strategies.context_parallel(step, "x", method="all_to_all"))
    loss_error, param_error = train_step.compare(model, loss_fn, batch, optimizer, prog, steps=3)
    print(f"Ulysses on x=2, 3 AdamW steps: losses within {loss_error:.1e} of torch's, parameters {param_error:.1e}")


if __name__ == "__main__":
    main()
