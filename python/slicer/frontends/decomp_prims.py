"""torch's primitive ops (`prims.*`) that torch's references leave in a traced graph, written as aten ops.

Some decompositions of the base table are torch's references (`torch._refs`), which reshape with primitive views:
`aten.squeeze.dims` (torch-mlir's table decomposes it, and every `squeeze` goes through it: the backward of
`unsqueeze` in an einsum's gradient, `torch.bmm` on a batched expert weight) is `prims.squeeze`. A primitive view
is a custom op whose result aliases its input, and functionalization (`torch.func.functionalize`, which
`torch_import.trace` runs when the graph has in-place ops, e.g. silu's backward) refuses every such op:
"Found a custom (non-ATen) operator whose output has alias annotations: prims::squeeze". The aten view ops are
what functionalization knows (and what torch-mlir imports), so each primitive view is decomposed into them:
torch's own aten implementations of the prims (`torch._prims._<name>_aten`) where one exists, and for
`prims.squeeze` (whose aten implementation calls `aten.squeeze`, decomposed back into `prims.squeeze`) a view
without the squeezed unit dims.

`prims.copy_strided` (torch's `lerp`, e.g. AdamW's moving averages, copies its result into its input's strides
when they differ, as after a transposed gradient) is not a view, but torch-mlir has no lowering for it either
("failed to legalize ... torch.prims.copy_strided"). Strides mean nothing to the tensors torch-mlir imports
(values, not memory), so the copy is a plain `clone`.
"""

from __future__ import annotations


def prims_decompositions(torch) -> dict:
    """{prims op: its aten form} (see the module docstring), for the tracing decomposition table."""
    from torch import _prims  # optional dependency; only used while torch traces

    prims = torch.ops.prims
    return {
        prims.squeeze.default: _squeeze,
        prims.view_of.default: _prims._view_of_aten,
        prims.broadcast_in_dim.default: _prims._broadcast_in_dim_aten,
        prims.collapse_view.default: _prims._collapse_view_aten,
        prims.split_dim.default: _prims._split_dim_aten,
        prims.transpose.default: _prims._transpose_aten,
        prims.copy_strided.default: _copy_strided,
    }


def _squeeze(a, dimensions):
    """`a` without its dims `dimensions` (each of size 1, as prims.squeeze requires): an aten view."""
    dims = {d % a.dim() for d in dimensions} if a.dim() else set()
    return a.view([size for d, size in enumerate(a.shape) if d not in dims])


def _copy_strided(a, stride):
    """A copy of `a` (the strides are a memory layout, which the imported tensors do not have)."""
    return a.clone()


__all__ = ["prims_decompositions"]
