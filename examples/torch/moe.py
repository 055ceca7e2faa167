"""A Mixtral-style mixture-of-experts layer in PyTorch: a linear router picks the top-k experts of each token,
softmax over their logits gives the gates, and each expert (a SwiGLU MLP) is weighted by its gate.

    logits = router(x)                       # [B, S, E]
    gates  = top-k of logits, softmaxed, written into zeros at the chosen experts   # [B, S, E]
    out    = sum_e gates[..., e] * expert_e(x)

Every expert runs on every token (dense dispatch: the gate is zero where an expert was not chosen), so the
result equals routing tokens to their experts. Two routers build the same gates:
- `scatter=True`: `torch.topk`, then `torch.zeros_like(logits).scatter(-1, top_index, top_gates)` (how many
  tutorials write it). torch-mlir alone would lower topk and scatter to its own `tm_tensor` ops (or crash on
  the scatter); Slicer's import writes both as one-hot comparisons and sums (slicer/frontends/decomp_indexing.py).
- `scatter=False`: a mask of the experts whose logit reaches the k-th largest (`logits >= kth`), softmax over the
  masked logits: only elementwise ops, a max and a sum. Both import, partition and equal torch.

Parameters (names as tactics use them): router.weight ([E, D]), experts.<e>.w1.weight, experts.<e>.w3.weight
([H, D]: gate and up projections), experts.<e>.w2.weight ([D, H]: down projection).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class Expert(nn.Module):
    """A SwiGLU MLP: w2(silu(w1 x) * w3 x)."""

    def __init__(self, d_model: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(d_model, hidden, bias=False)
        self.w3 = nn.Linear(d_model, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class MoE(nn.Module):
    """`experts` SwiGLU experts, the top `top_k` of them per token weighted by their softmaxed router logits."""

    def __init__(self, d_model: int, hidden: int, experts: int, top_k: int = 2, scatter: bool = False):
        super().__init__()
        self.top_k, self.scatter = top_k, scatter
        self.router = nn.Linear(d_model, experts, bias=False)
        self.experts = nn.ModuleList(Expert(d_model, hidden) for _ in range(experts))

    def gates(self, logits: torch.Tensor) -> torch.Tensor:
        """[..., E] gates: softmax over each token's top-k logits, zero for the other experts."""
        if self.scatter:
            top_logits, top_index = torch.topk(logits, self.top_k, dim=-1)
            return torch.zeros_like(logits).scatter(-1, top_index, F.softmax(top_logits, dim=-1))
        kth = self._kth(logits)
        masked = logits.masked_fill(logits < kth, float("-inf"))
        return F.softmax(masked, dim=-1)

    def _kth(self, logits: torch.Tensor) -> torch.Tensor:
        """[..., 1]: the k-th largest logit of each token, by removing the largest k - 1 times (max, no sort)."""
        remaining = logits
        for _ in range(self.top_k - 1):
            top = remaining.amax(dim=-1, keepdim=True)
            remaining = remaining.masked_fill(remaining >= top, float("-inf"))
        return remaining.amax(dim=-1, keepdim=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gates = self.gates(self.router(x))
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            out = out + gates[..., e:e + 1] * expert(x)
        return out
