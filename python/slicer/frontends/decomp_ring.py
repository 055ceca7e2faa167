"""`F.scaled_dot_product_attention` as ring attention over `blocks` blocks of the sequence (context parallelism).

Queries, keys and values are cut into `blocks` blocks of the sequence, `[B, H, n, c, E]` (n = blocks, c = S/n),
and attention runs as n steps of block-diagonal attention: at step t query block i attends key block
(i + t) mod n, and the keys and values move to the next step by one rotation of the block dim (block i takes
block i + 1: a `cat` of two slices). The blocks are combined by an online softmax, its running maximum and sum
kept in f32. Tiled over a mesh axis of n devices, every device keeps its own queries and computes one block per
step while the keys and values travel around the axis: each rotation is one point-to-point transfer
(`spmd/permuted_blocks.py`), and no device holds more than one [c, c] block of scores or one block of K and V.

The backward is written by hand (a `torch.autograd.Function`), as FlashAttention's: it keeps only the output and
the log-sum-exp of each row, recomputes each step's scores, and the gradients of the keys and values travel
around the ring with them (rotated once more at the end, home to their blocks). Causal masks are computed from
each block's start (key position <= query position, as torch's top-left aligned `is_causal`); a boolean or
additive mask that depends on the key only ([.., 1, S], a padding mask) is cut and rotated with the keys. Other
masks and dropout are not written this way (`ring_attention` returns NotImplemented and the plain math of
`decomp_attention.py` applies). A row no key may attend gives 0, as torch's CPU kernel.
"""

from __future__ import annotations

import math

from .decomp_attention import repeat_heads

LOWEST = -1e30
"""The score of a masked key while the running maximum is computed (finite: a row masked so far stays finite)."""


def ring_attention(blocks: int, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                   enable_gqa=False):
    """What `F.scaled_dot_product_attention` computes, as ring attention over `blocks` blocks (module docstring);
    NotImplemented where it is not written this way (dropout, a mask that depends on the query, a sequence that
    `blocks` does not divide, keys of another length)."""
    import torch  # optional dependency; only called while torch traces

    seq = query.shape[-2]
    if dropout_p > 0 or query.dim() != 4 or key.shape[-2] != seq or seq % blocks:
        return NotImplemented
    if attn_mask is not None and (attn_mask.dim() > 4 or (attn_mask.dim() >= 2 and attn_mask.shape[-2] != 1)):
        return NotImplemented
    if enable_gqa and key.shape[-3] != query.shape[-3]:
        key, value = repeat_heads(key, query.shape[-3]), repeat_heads(value, query.shape[-3])
    factor = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
    mask = None if attn_mask is None else _key_blocks(attn_mask, blocks)
    return _function(torch).apply(query, key, value, mask, bool(is_causal), float(factor), blocks)


def _key_blocks(mask, blocks: int):
    """A mask over the keys ([.., 1, S] or [S]) as [B?, H?, n, 1, c]: block j of the keys on the block dim."""
    mask = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape)) if mask.dim() < 4 else mask
    b, h, _, s = mask.shape
    return mask.reshape(b, h, 1, blocks, s // blocks).transpose(2, 3)


def rotate(tensor):
    """Block i of the block dim (dim 2) takes block i + 1 (mod n): one step around the ring."""
    import torch

    return torch.cat([tensor[:, :, 1:], tensor[:, :, :1]], dim=2)


_FUNCTIONS: dict = {}


def autograd_function(torch, name: str, forward, backward):
    """The `torch.autograd.Function` called `name` with this forward and backward (made once: torch is imported on
    first use; the ring and the zig-zag ring each have one)."""
    if name not in _FUNCTIONS:
        _FUNCTIONS[name] = type(name, (torch.autograd.Function,), {
            "forward": staticmethod(forward), "backward": staticmethod(backward)})
    return _FUNCTIONS[name]


def _function(torch):
    return autograd_function(torch, "RingAttention", _forward, _backward)


def _allowed(torch, causal: bool, mask, blocks: int, chunk: int, step: int, device):
    """The keys each query may attend at `step` ([n, c, c] or broadcastable; None: all), and the additive mask
    ([.., n, 1, c] or None), the mask's blocks rotated `step` times."""
    allowed, additive = None, None
    if causal:
        start = torch.arange(blocks, device=device) * chunk
        rows = (start.view(blocks, 1, 1) + torch.arange(chunk, device=device).view(1, chunk, 1))
        keys = (torch.remainder(torch.arange(blocks, device=device) + step, blocks) * chunk).view(blocks, 1, 1)
        allowed = keys + torch.arange(chunk, device=device).view(1, 1, chunk) <= rows
    if mask is not None:
        for _ in range(step):
            mask = rotate(mask)
        if mask.dtype == torch.bool:
            allowed = mask if allowed is None else allowed & mask
        else:
            additive = mask.float()
    return allowed, additive


def block_scores(torch, q, k, factor, allowed, additive, *, again: bool = False):
    """One step's scores in f32, masked keys at LOWEST. `again` (the backward's recomputation): scaled before the
    product instead of after, so that the cleanup's CSE does not take the forward's scores for them (which would
    keep every step's scores alive until the backward)."""
    scores = (q.float() * factor) @ k.float().transpose(-1, -2) if again else (q @ k.transpose(-1, -2)).float() * factor
    if additive is not None:
        scores = scores + additive
    if allowed is not None:
        scores = torch.where(allowed, scores, torch.full((), LOWEST, device=scores.device))
    return scores


def online_update(torch, state, scores, allowed, v):
    """One online-softmax step of rows `state` = (max, sum, acc) over scores [.., cq, ck] and values v (f32)."""
    top, total, acc = state
    new_top = torch.maximum(top, scores.amax(-1, keepdim=True))
    weights = torch.exp(scores - new_top)
    if allowed is not None:
        weights = torch.where(allowed, weights, torch.zeros((), device=scores.device))
    correction = torch.exp(top - new_top)
    return new_top, total * correction + weights.sum(-1, keepdim=True), acc * correction + weights @ v.float()


def online_finish(torch, state):
    """(output, log-sum-exp) of rows from their online-softmax state; a row no key may attend gives 0."""
    top, total, acc = state
    seen = total > 0
    safe = torch.where(seen, total, torch.ones((), device=total.device))
    return torch.where(seen, acc / safe, torch.zeros(())), top + torch.log(safe)


def _forward(ctx, query, key, value, mask, causal: bool, factor: float, blocks: int):
    import torch

    b, h, s, e = query.shape
    chunk = s // blocks
    q, k, v = (t.reshape(b, h, blocks, chunk, t.shape[-1]) for t in (query, key, value))
    top = torch.full((b, h, blocks, chunk, 1), LOWEST, device=q.device)
    total = torch.zeros((b, h, blocks, chunk, 1), device=q.device)
    acc = torch.zeros((b, h, blocks, chunk, v.shape[-1]), device=q.device)
    for step in range(blocks):
        if step:
            k, v = rotate(k), rotate(v)
        allowed, additive = _allowed(torch, causal, mask, blocks, chunk, step, q.device)
        scores = block_scores(torch, q, k, factor, allowed, additive)
        top, total, acc = online_update(torch, (top, total, acc), scores, allowed, v)
    out, lse = online_finish(torch, (top, total, acc))
    ctx.save_for_backward(query, key, value, out, lse, *(() if mask is None else (mask,)))
    ctx.options = (causal, factor, blocks, mask is not None)
    return out.to(query.dtype).reshape(b, h, s, v.shape[-1])


def _backward(ctx, grad):
    import torch

    causal, factor, blocks, masked = ctx.options
    query, key, value, out, lse, *rest = ctx.saved_tensors
    mask = rest[0] if masked else None
    b, h, s, e = query.shape
    chunk = s // blocks
    q, k, v = (t.reshape(b, h, blocks, chunk, t.shape[-1]) for t in (query, key, value))
    dout = grad.reshape(out.shape).float()
    delta = (dout * out).sum(-1, keepdim=True)
    dq = torch.zeros(q.shape, device=q.device)
    dk = dv = None
    for step in range(blocks):
        if step:
            k, v, dk, dv = rotate(k), rotate(v), rotate(dk), rotate(dv)
        allowed, additive = _allowed(torch, causal, mask, blocks, chunk, step, q.device)
        weights = torch.exp(block_scores(torch, q, k, factor, allowed, additive, again=True) - lse)
        if allowed is not None:
            weights = torch.where(allowed, weights, torch.zeros((), device=q.device))
        step_dv = weights.transpose(-1, -2) @ dout
        dscores = weights * (dout @ v.float().transpose(-1, -2) - delta)
        dq = dq + dscores @ k.float() * factor
        step_dk = dscores.transpose(-1, -2) @ q.float() * factor
        dk = step_dk if dk is None else dk + step_dk
        dv = step_dv if dv is None else dv + step_dv
    if blocks > 1:
        dk, dv = rotate(dk), rotate(dv)
    shaped = [t.reshape(b, h, s, t.shape[-1]).to(x.dtype) for t, x in ((dq, query), (dk, key), (dv, value))]
    return (*shaped, None, None, None, None)


__all__ = ["LOWEST", "autograd_function", "block_scores", "online_finish", "online_update", "ring_attention", "rotate"]
