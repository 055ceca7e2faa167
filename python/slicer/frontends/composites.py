"""Decompositions of torch's composite functions, applied above autograd while a program is traced.

A decomposition table (`decompositions.py`) rewrites aten ops as make_fx records them: below autograd. That is
too late for a function whose kernel has its own derivative: autograd has recorded the kernel's backward, which
no table entry reaches (`F.scaled_dot_product_attention`'s fused CPU kernel, see `decomp_attention.py`), and for
a function whose kernel checks its input's values before any op is recorded (`F.one_hot` reads the indices'
range: "aten._local_scalar_dense", see `decomp_indexing.one_hot`). These functions are replaced where the user
calls them, through a `torch.overrides.TorchFunctionMode` active while the function is traced: autograd then
derives the backward of the replacement's ops. A replacement returns NotImplemented to leave a call as it is
(torch then reports what it cannot trace, e.g. one_hot without num_classes).
"""

from __future__ import annotations

import contextlib
import contextvars

from .decomp_attention import scaled_dot_product_attention
from .decomp_indexing import one_hot
from .decomp_ring import ring_attention
from .decomp_rows import sequence_major, sequence_major_linear
from .decomp_zigzag import balanced_attention, zigzag_arange

_RING_BLOCKS: contextvars.ContextVar[tuple[int, int | None, int | None] | None] = contextvars.ContextVar(
    "ring_blocks", default=None)


@contextlib.contextmanager
def attention_in_blocks(blocks: int, balanced: int | None = None, rows: int | None = None):
    """While active, `F.scaled_dot_product_attention` is traced as ring attention over `blocks` blocks of the
    sequence (`decomp_ring.py`; context parallelism), where that form applies, else as its plain math. With
    `balanced` (the sequence's length), the sequence is in zig-zag order (`decomp_zigzag.py`): causal attention
    is load-balanced and `torch.arange(balanced)` gives the positions in that order. With `rows` (the sequence's
    length), a merge of the batch and the sequence into rows is made sequence-major (`decomp_rows.py`)."""
    token = _RING_BLOCKS.set((blocks, balanced, rows))
    try:
        yield
    finally:
        _RING_BLOCKS.reset(token)


def _attention(*args, **kwargs):
    ring = _RING_BLOCKS.get()
    if ring is not None:
        blocks, balanced, _ = ring
        result = NotImplemented if balanced is None else balanced_attention(blocks, *args, **kwargs)
        if result is NotImplemented:
            result = ring_attention(blocks, *args, **kwargs)
        if result is not NotImplemented:
            return result
    return scaled_dot_product_attention(*args, **kwargs)


def _arange(*args, **kwargs):
    ring = _RING_BLOCKS.get()
    if ring is None or ring[1] is None:
        return NotImplemented
    return zigzag_arange(ring[0], ring[1], *args, **kwargs)


def _merged_rows(func, how=sequence_major):
    def merged(*args, **kwargs):
        ring = _RING_BLOCKS.get()
        return NotImplemented if ring is None or ring[2] is None else how(ring[2], func, *args, **kwargs)

    return merged


def composite_decompositions(torch) -> dict:
    """{torch function: its replacement while tracing} (see the module docstring)."""
    functional = torch.nn.functional
    merges = (torch.flatten, torch.reshape, torch.Tensor.flatten, torch.Tensor.reshape, torch.Tensor.view)
    return {functional.scaled_dot_product_attention: _attention, functional.one_hot: one_hot, torch.arange: _arange,
            functional.linear: _merged_rows(functional.linear, sequence_major_linear),
            **{f: _merged_rows(f) for f in merges}}


@contextlib.contextmanager
def decomposed_composites(torch):
    """While active, the functions of `composite_decompositions` run as their replacements."""
    from torch.overrides import TorchFunctionMode  # optional dependency, like torch itself

    table = composite_decompositions(torch)

    class Replaced(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            replacement = table.get(func)
            if replacement is not None:
                result = replacement(*args, **kwargs)
                if result is not NotImplemented:
                    return result
            return func(*args, **kwargs)

    with Replaced():
        yield


__all__ = ["attention_in_blocks", "composite_decompositions", "decomposed_composites"]
