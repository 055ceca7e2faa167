"""`F.scaled_dot_product_attention` written as the math it computes, so that autograd derives its backward.

How nanoGPT, Hugging Face and torchtitan write attention. Traced with gradients (`training_step`), torch runs it
as its fused CPU kernel `_scaled_dot_product_flash_attention_for_cpu`, and autograd records that kernel's own
backward (`..._for_cpu_backward`), an op torch-mlir cannot lower. The decomposition tables (torch-mlir's, and
torch's `scaled_dot_product_flash_attention_for_cpu` in torch._decomp) apply below autograd: they rewrite the
forward kernel but leave its backward. So the function itself is replaced while tracing (`composites.py`),
above autograd, by the reference math of torch's documentation:

    scores  = q @ k^T * scale            (scale: 1/sqrt(E) unless given)
    scores  = where(causal, scores, -inf)          is_causal: key j <= query i (top-left aligned, as torch)
    scores  = where(mask, scores, -inf) | scores + mask    attn_mask: boolean (True = attend) or additive
    weights = softmax(scores), 0 on a row no key may be attended (torch's CPU kernel returns 0 there)
    out     = dropout(weights, p) @ v

with grouped-query attention (`enable_gqa=True`: fewer key/value heads than query heads) as each key/value
head repeated for its group of query heads (`repeat_interleave` along the heads, as torch does), and dropout
as `F.dropout` (whatever the frontend does with dropout, it does here). Autograd then differentiates matmuls, a
softmax and selects, all of which lower to linalg; Megatron tiles the heads and data parallelism the batch
through them like hand-written attention.
"""

from __future__ import annotations

import math


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """What `F.scaled_dot_product_attention` computes (see the module docstring), in differentiable ops."""
    import torch  # optional dependency; only called while torch traces

    if enable_gqa and key.shape[-3] != query.shape[-3]:
        key, value = repeat_heads(key, query.shape[-3]), repeat_heads(value, query.shape[-3])
    factor = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = (query @ key.transpose(-2, -1)) * factor
    lowest = torch.full((), float("-inf"), dtype=scores.dtype, device=scores.device)
    if is_causal:
        rows = torch.arange(query.shape[-2], device=query.device).unsqueeze(-1)
        scores = torch.where(rows >= torch.arange(key.shape[-2], device=query.device), scores, lowest)
    if attn_mask is not None:
        scores = torch.where(attn_mask, scores, lowest) if attn_mask.dtype == torch.bool else scores + attn_mask
    weights = torch.softmax(scores, dim=-1)
    if attn_mask is not None:  # a row every key of which is masked: 0, not softmax's NaN (as torch's kernel)
        weights = torch.where((scores == lowest).all(-1, keepdim=True), torch.zeros_like(lowest), weights)
    if dropout_p > 0:
        weights = torch.nn.functional.dropout(weights, dropout_p)
    return weights @ value


def repeat_heads(tensor, heads: int):
    """[.., Hkv, S, E] -> [.., heads, S, E]: head h of the result is head h // (heads / Hkv) of `tensor`."""
    *batch, groups, seq, size = tensor.shape
    repeats = heads // groups
    return tensor.unsqueeze(-3).expand(*batch, groups, repeats, seq, size).reshape(*batch, heads, seq, size)


__all__ = ["repeat_heads", "scaled_dot_product_attention"]
