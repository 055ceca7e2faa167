"""Causal ring attention load-balanced: the sequence in zig-zag order, the blocks the mask hides not computed.

With n blocks the sequence is cut into 2n chunks of c = S/2n and block i holds chunks i and 2n-1-i (an early and
a late one): `zigzag_order` is that order of the positions. The program receives its sequence in this order (the
inputs are permuted where the batch enters, `context_import.py`), so a block tiled over n devices puts one early
and one late chunk on every device. At step t block i holds key block j = (i + t) mod n (rotations as
`decomp_ring.py`). Step 0: its early queries attend its early keys (causal within the chunk) and its late queries
attend both of its chunks (the second causal); the early queries' view of the late keys is masked whole, skipped.
Step t > 0: the late queries attend the early keys of j in full; if j > i they also attend j's late keys, else
the early queries attend j's early keys; every other pair is masked whole and skipped. So every block computes
3 [c, c] products at step 0 and 2 at each later step (the plain ring: 4 of them at every step), the same on every
device. The pair that depends on i vs j is one product on operands chosen per block (`torch.where` on the block
index), so the program stays the same on every device. Online softmax in f32 and the hand-written backward as
`decomp_ring.py`. torch takes no mask with `is_causal`: a padding mask (non-causal) runs as the plain ring.
"""

from __future__ import annotations

import math

import numpy as np

from .decomp_attention import repeat_heads
from .decomp_ring import LOWEST, autograd_function, block_scores, online_finish, online_update, rotate


def zigzag_order(seq: int, blocks: int) -> np.ndarray:
    """The positions of a sequence of `seq` in zig-zag order over `blocks` blocks (module docstring)."""
    chunk = seq // (2 * blocks)
    block, half, offset = np.arange(blocks)[:, None, None], np.arange(2)[None, :, None], np.arange(chunk)
    return ((block + half * (2 * blocks - 1 - 2 * block)) * chunk + offset).reshape(seq)


def zigzag_positions(torch, seq: int, blocks: int, dtype=None, device=None):
    """`zigzag_order` as a torch tensor made of iotas (what `torch.arange(seq)` becomes while a balanced step is
    traced: the positions of the tokens the program holds)."""
    chunk = seq // (2 * blocks)
    block = torch.arange(blocks, device=device).view(blocks, 1, 1)
    half = torch.arange(2, device=device).view(1, 2, 1)
    found = (block + half * (2 * blocks - 1 - 2 * block)) * chunk + torch.arange(chunk, device=device).view(1, 1, chunk)
    return found.reshape(seq).to(torch.int64 if dtype is None else dtype)


def zigzag_arange(blocks: int, seq: int, *args, **kwargs):
    """`torch.arange(*args, **kwargs)` while a step of `seq` tokens in zig-zag order is traced: `arange(seq)` (from
    0, step 1) is the positions of the tokens (`zigzag_positions`); any other range NotImplemented (as it is)."""
    import torch

    ends = [a for a in (*args, kwargs.get("start"), kwargs.get("end"), kwargs.get("step")) if a is not None]
    if ends not in ([seq], [0, seq], [0, seq, 1]) or "out" in kwargs:
        return NotImplemented
    return zigzag_positions(torch, seq, blocks, kwargs.get("dtype"), kwargs.get("device"))


def balanced_attention(blocks: int, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                       enable_gqa=False):
    """`F.scaled_dot_product_attention` of a sequence in zig-zag order: causal attention in zig-zag blocks
    (`zigzag_attention`); NotImplemented for the rest (no causal mask: the plain ring, as the order does not
    matter to it)."""
    seq = query.shape[-2]
    if not is_causal or attn_mask is not None or dropout_p > 0 or query.dim() != 4 or key.shape[-2] != seq \
            or seq % (2 * blocks) or blocks < 2:
        return NotImplemented
    if enable_gqa and key.shape[-3] != query.shape[-3]:
        key, value = repeat_heads(key, query.shape[-3]), repeat_heads(value, query.shape[-3])
    return zigzag_attention(blocks, query, key, value, 1 / math.sqrt(query.shape[-1]) if scale is None else scale)


def zigzag_attention(blocks: int, query, key, value, factor: float):
    """Causal attention of q, k, v ([B, H, S, E], S in zig-zag order) in `blocks` zig-zag blocks."""
    import torch  # optional dependency; only called while torch traces

    return _function(torch).apply(query, key, value, float(factor), blocks)


def _function(torch):
    return autograd_function(torch, "ZigzagAttention", _forward, _backward)


class _Blocks:
    """The operands of one run: q, k, v as [B, H, n, 2, c, E] (block, half), the masks and the choice per block."""

    def __init__(self, torch, query, key, value, blocks: int):
        b, h, s, _ = query.shape
        self.torch, self.n, self.c = torch, blocks, s // (2 * blocks)
        self.q, self.k, self.v = (t.reshape(b, h, blocks, 2, self.c, t.shape[-1]) for t in (query, key, value))
        offsets = torch.arange(self.c, device=query.device)
        self.diagonal = offsets.view(1, self.c) <= offsets.view(self.c, 1)  # key offset <= query offset
        self.own = torch.cat([torch.ones_like(self.diagonal), self.diagonal], dim=1)  # late rows, both own chunks

    def later(self, step: int):
        """[n, 1, 1]: whether block i holds a key block j > i at `step` (then its late rows take j's late keys)."""
        return (self.torch.arange(self.n, device=self.q.device) + step < self.n).view(self.n, 1, 1)

    def whole(self, tensor):
        """A block's two chunks as one: [B, H, n, 2, c, E] -> [B, H, n, 2c, E]."""
        return tensor.reshape(*tensor.shape[:3], 2 * self.c, tensor.shape[-1])


def _pairs(z: _Blocks, step: int, k, v):
    """This step's products: (query half, keys, values, allowed) for the early and late rows; a product whose
    rows depend on the block is given with half None and `later` choosing (late rows, late keys) over (early rows,
    early keys)."""
    if step == 0:
        return [(0, k[:, :, :, 0], v[:, :, :, 0], z.diagonal), (1, z.whole(k), z.whole(v), z.own)]
    return [(1, k[:, :, :, 0], v[:, :, :, 0], None), (None, k, v, None)]


def _forward(ctx, query, key, value, factor: float, blocks: int):
    import torch

    z = _Blocks(torch, query, key, value, blocks)
    b, h, n, _, c, _ = z.q.shape
    zeros = (torch.full((b, h, n, c, 1), LOWEST), torch.zeros((b, h, n, c, 1)),
             torch.zeros((b, h, n, c, z.v.shape[-1])))
    states, k, v = [zeros, zeros], z.k, z.v
    for step in range(blocks):
        if step:
            k, v = rotate(k), rotate(v)
        later = z.later(step)
        for half, keys, values, allowed in _pairs(z, step, k, v):
            if half is not None:
                scores = block_scores(torch, z.q[:, :, :, half], keys, factor, allowed, None)
                states[half] = online_update(torch, states[half], scores, allowed, values)
                continue
            rows = torch.where(later, z.q[:, :, :, 1], z.q[:, :, :, 0])
            keys, values = torch.where(later, k[:, :, :, 1], k[:, :, :, 0]), torch.where(later, v[:, :, :, 1],
                                                                                         v[:, :, :, 0])
            chosen = tuple(torch.where(later, s1, s0) for s0, s1 in zip(*states))
            chosen = online_update(torch, chosen, block_scores(torch, rows, keys, factor, None, None), None, values)
            states = [tuple(torch.where(later, s0, new) for s0, new in zip(states[0], chosen)),
                      tuple(torch.where(later, new, s1) for s1, new in zip(states[1], chosen))]
    out, lse = zip(*(online_finish(torch, state) for state in states))
    out, lse = torch.stack(out, 3), torch.stack(lse, 3)
    ctx.save_for_backward(query, key, value, out, lse)
    ctx.options = (factor, blocks)
    return out.to(query.dtype).reshape(query.shape[:3] + (value.shape[-1],))


def _grads(torch, q, k, v, dout, lse, delta, factor, allowed):
    """FlashAttention's gradients of one product: (dq, dk, dv) in f32."""
    weights = torch.exp(block_scores(torch, q, k, factor, allowed, None, again=True) - lse)
    if allowed is not None:
        weights = torch.where(allowed, weights, torch.zeros(()))
    dscores = weights * (dout @ v.float().transpose(-1, -2) - delta)
    dq, dk = dscores @ k.float() * factor, dscores.transpose(-1, -2) @ q.float() * factor
    return dq, dk, weights.transpose(-1, -2) @ dout


def _backward(ctx, grad):
    import torch

    factor, blocks = ctx.options
    query, key, value, out, lse = ctx.saved_tensors
    z = _Blocks(torch, query, key, value, blocks)
    dout = grad.reshape(out.shape).float()
    delta = (dout * out).sum(-1, keepdim=True)
    rows = [tuple(t[:, :, :, half] for t in (z.q, dout, lse, delta)) for half in (0, 1)]
    dq, dk, dv, k, v = [torch.zeros(z.q.shape[:3] + z.q.shape[4:])] * 2, None, None, z.k, z.v
    for step in range(blocks):
        if step:
            k, v, dk, dv = rotate(k), rotate(v), rotate(dk), rotate(dv)
        later, step_dk, step_dv = z.later(step), [0.0, 0.0], [0.0, 0.0]
        for half, keys, values, allowed in _pairs(z, step, k, v):
            if half == 0:
                gq, step_dk[0], step_dv[0] = _grads(torch, *rows[0][:1], keys, values, *rows[0][1:], factor, allowed)
                dq[0] = dq[0] + gq
            elif half == 1:
                gq, gk, gv = _grads(torch, *rows[1][:1], keys, values, *rows[1][1:], factor, allowed)
                dq[1] = dq[1] + gq
                if step == 0:  # both own chunks
                    gk, gv = (g.reshape(g.shape[:3] + (2, z.c, g.shape[-1])) for g in (gk, gv))
                    step_dk = [step_dk[0] + gk[:, :, :, 0], gk[:, :, :, 1]]
                    step_dv = [step_dv[0] + gv[:, :, :, 0], gv[:, :, :, 1]]
                else:
                    step_dk[0], step_dv[0] = step_dk[0] + gk, step_dv[0] + gv
            else:
                chosen = [torch.where(later, late, early) for early, late in zip(*rows)]
                keys, values = torch.where(later, k[:, :, :, 1], k[:, :, :, 0]), torch.where(later, v[:, :, :, 1],
                                                                                             v[:, :, :, 0])
                gq, gk, gv = _grads(torch, chosen[0], keys, values, *chosen[1:], factor, None)
                none = torch.zeros(())
                dq = [dq[0] + torch.where(later, none, gq), dq[1] + torch.where(later, gq, none)]
                step_dk = [step_dk[0] + torch.where(later, none, gk), torch.where(later, gk, none)]
                step_dv = [step_dv[0] + torch.where(later, none, gv), torch.where(later, gv, none)]
        made_k, made_v = torch.stack(step_dk, 3), torch.stack(step_dv, 3)
        dk = made_k if dk is None else dk + made_k
        dv = made_v if dv is None else dv + made_v
    if blocks > 1:
        dk, dv = rotate(dk), rotate(dv)
    shaped = [t.reshape(x.shape).to(x.dtype) for t, x in ((torch.stack(dq, 3), query), (dk, key), (dv, value))]
    return (*shaped, None, None)


__all__ = ["balanced_attention", "zigzag_arange", "zigzag_attention", "zigzag_order", "zigzag_positions"]
