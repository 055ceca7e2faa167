"""Indexed reads and writes of static shapes (`topk`, `gather`, `scatter`, `scatter_add`, `index_select`,
`index_add`, `index_put` with one index tensor) as one-hot comparisons, selects and reductions, while a program
is traced; and `cumsum` (lowered to a `tm_tensor.scan` too) as a triangular mask and a sum.

torch-mlir lowers topk, sort, scatter and index_put to its own `tm_tensor` ops, which MLIR's linalg has no form
for (this MLIR cannot parse them), and gather and index_select to a `tensor.extract` at a data-dependent position,
which no tiling can follow. A router of a mixture of experts uses them all: `topk` of the router's logits, and
its backward (autograd's formula for topk: a `scatter` of the gradient into zeros at the chosen indices). With a
one-hot mask `onehot[..., j, v] = (index[..., j] == v)` each is an elementwise select and a sum, which torch-mlir
lowers to one `linalg.generic` (after fusion) that partitions like a contraction:

    gather(x, d, i)[.., j, ..]          = sum_v where(onehot[.., j, v], x[.., v, ..], 0)
    scatter_add(x, d, i, s)[.., v, ..]  = x[.., v, ..] + sum_j where(onehot[.., j, v], s[.., j, ..], 0)
    scatter(x, d, i, s)                 = where(any_j onehot, that sum, x)

Details: docs/module-notes.md, `frontends/decomp_indexing.py`.
"""

from __future__ import annotations

import traceback

from slicer.core.errors import FrontendError
from slicer.core.source_lines import first_user_frame


def indexing_decompositions(torch) -> dict:
    """{aten op: one-hot form} (see the module docstring), for the tracing decomposition table."""
    aten = torch.ops.aten
    return {
        aten.topk.default: _topk,
        aten.gather.default: _gather,
        aten.scatter_add.default: _scatter_add,
        aten.scatter.src: _scatter,
        aten.scatter.value: _scatter_value,
        aten.index_select.default: _index_select,
        aten.index_add.default: _index_add,
        aten.index_add_.default: _index_add_in_place,
        aten.index_put.default: _index_put,
        aten.cumsum.default: _cumsum,
    }


def _called_at() -> str:
    """` at file:line`, the model's line whose op is being decomposed (the innermost frame of the user's code on
    the stack), or "" if there is none."""
    frame = first_user_frame([(f.filename, f.lineno) for f in reversed(traceback.extract_stack())])
    return f" at {frame[0]}:{frame[1]}" if frame else ""


def _torch():
    import torch  # optional dependency; only called while torch traces

    return torch


def _one_hot(index, classes: int):
    """[*index.shape, classes] booleans: index[..] == v."""
    torch = _torch()
    return index.unsqueeze(-1) == torch.arange(classes, dtype=index.dtype, device=index.device)


def _zero(x):
    return _torch().zeros((), dtype=x.dtype, device=x.device)


def _leading(x, shape, dim: int | None = None):
    """`x` cut to `shape` in every dim but `dim` (gather reads the leading part of the other dims of its
    input, scatter that of every dim of its source)."""
    cut = [slice(None) if d == dim or x.shape[d] == size else slice(0, size) for d, size in enumerate(shape)]
    return x[tuple(cut)] if any(c != slice(None) for c in cut) else x


def _gather(self, dim, index, sparse_grad=False):
    """out[.., j, ..] = self[.., index[.., j, ..], ..] along `dim`, as a one-hot pick."""
    torch = _torch()
    if self.dim() == 0:
        return self.expand(index.shape).clone()
    dim = dim % self.dim()
    source = _leading(self, index.shape, dim).movedim(dim, -1).unsqueeze(dim)  # [.., 1 at dim, .., n]
    return torch.where(_one_hot(index, self.shape[dim]), source, _zero(self)).sum(-1).to(self.dtype)


def _scattered(self, dim, index, src):
    """(hit, added): which positions of `self` an index names, and the sum of the `src` values written there
    (both of self's shape), for scatter and scatter_add along `dim`."""
    torch = _torch()
    dim = dim % self.dim()
    onehot = _one_hot(index, self.shape[dim])  # [*index.shape, n]
    values = _leading(src, index.shape).unsqueeze(-1)
    added = torch.where(onehot, values, _zero(self)).sum(dim).movedim(-1, dim)
    hit = onehot.any(dim).movedim(-1, dim)
    pad = [p for d in reversed(range(self.dim())) for p in (0, self.shape[d] - added.shape[d])]
    if any(pad):  # index shorter than self in a dim other than `dim`: nothing written past it
        added = torch.nn.functional.pad(added, pad)
        hit = torch.nn.functional.pad(hit, pad)
    return hit, added.to(self.dtype)


def _scatter_add(self, dim, index, src):
    if self.dim() == 0:
        return NotImplemented
    return self + _scattered(self, dim, index, src)[1]


def _scatter(self, dim, index, src, reduce=None):
    if reduce is not None or self.dim() == 0:
        return NotImplemented
    hit, added = _scattered(self, dim, index, src)
    return _torch().where(hit, added, self)


def _scatter_value(self, dim, index, value, reduce=None):
    if reduce is not None:
        return NotImplemented
    return _scatter(self, dim, index, _torch().full(index.shape, value, dtype=self.dtype, device=self.device))


def _index_select(self, dim, index):
    """The rows `index` (1-D, or a scalar) of `self` along `dim`: a one-hot pick per row."""
    torch = _torch()
    if self.dim() == 0:
        return self.clone()
    dim = dim % self.dim()
    rows = self.movedim(dim, 0).unsqueeze(0)  # [1, n, *rest]
    onehot = _one_hot(index.reshape(-1), self.shape[dim])  # [m, n]
    onehot = onehot.reshape(*onehot.shape, *([1] * (self.dim() - 1)))
    picked = torch.where(onehot, rows, _zero(self)).sum(1).to(self.dtype)  # [m, *rest] (sum widens ints)
    return picked.movedim(0, dim)


def _added_rows(self, dim, index, source):
    """[self.shape]: the rows of `source` (along `dim`) added into the rows of `self` that `index` names (only
    the added part): a one-hot sum over the source's rows."""
    torch = _torch()
    dim = dim % self.dim()
    rows = source.movedim(dim, 0).unsqueeze(1)  # [m, 1, *rest]
    onehot = _one_hot(index.reshape(-1), self.shape[dim])  # [m, n]
    onehot = onehot.reshape(*onehot.shape, *([1] * (self.dim() - 1)))
    return torch.where(onehot, rows, _zero(self)).sum(0).movedim(0, dim).to(self.dtype)


def _index_add(self, dim, index, source, *, alpha=1):
    if self.dim() == 0:
        return NotImplemented
    added = _added_rows(self, dim, index, source)
    return self + (added if alpha == 1 else alpha * added)


def _index_add_in_place(self, dim, index, source, *, alpha=1):
    """`index_add_` (a flat-token MoE's combine, index_select's backward): `_index_add` written back into
    `self`, which the trace's functionalization makes a value again."""
    added = _index_add(self, dim, index, source, alpha=alpha)
    return NotImplemented if added is NotImplemented else self.copy_(added)


def _index_put(self, indices, values, accumulate=False):
    """`self[..., index, ...] = values` (or `+=` with `accumulate`) for one integer index tensor after
    `None`s (whole dims); NotImplemented (torch-mlir's lowering, tm_tensor) for masks or several indices."""
    torch = _torch()
    tensors = [i for i in indices if i is not None]
    if len(tensors) != 1 or tensors[0].dtype in (torch.bool, torch.uint8) or indices[-1] is None:
        return NotImplemented
    dim = len(indices) - 1
    if any(i is not None for i in indices[:dim]) or self.dim() <= dim:
        return NotImplemented
    index = tensors[0].reshape(-1)
    index = torch.where(index < 0, index + self.shape[dim], index)
    shape = self.shape[:dim] + tuple(tensors[0].shape) + self.shape[dim + 1:]
    source = values.expand(shape).reshape(self.shape[:dim] + (index.shape[0],) + self.shape[dim + 1:])
    added = _added_rows(self, dim, index, source.to(self.dtype))
    if accumulate:
        return self + added
    hit = _one_hot(index, self.shape[dim]).any(0)
    hit = hit.reshape(*([1] * dim), -1, *([1] * (self.dim() - dim - 1)))
    return torch.where(hit, added, self)


def _topk(self, k, dim=-1, largest=True, sorted=True):
    """(values, indices) of the `k` largest (smallest) entries along `dim`: see the module docstring."""
    torch = _torch()
    if self.dim() == 0:
        return self.clone(), torch.zeros((), dtype=torch.long, device=self.device)
    x = self.movedim(dim % self.dim(), -1)
    n = x.shape[-1]
    if not 0 <= k <= n:
        raise FrontendError(f"topk{_called_at()}: k={k} is not between 0 and the {n} entries along dim {dim} "
                            "(torch raises 'selected index k out of range'); pass a k within the dim's size")
    key = x if largest else -x
    nan = torch.isnan(x)
    positions = torch.arange(n, device=x.device)
    taken = torch.zeros(x.shape, dtype=torch.bool, device=x.device)
    lowest = torch.full((), float("-inf"), dtype=x.dtype, device=x.device)
    values, indices = [], []
    for _ in range(k):
        top = torch.where(taken | nan, lowest, key).amax(-1, keepdim=True)
        number = ~taken & ~nan & (key == top)
        nan_left = ~taken & nan
        if largest:
            candidates = torch.where(nan_left.any(-1, keepdim=True), nan_left, number)
        else:
            candidates = torch.where(number.any(-1, keepdim=True), number, nan_left)
        first = torch.where(candidates, positions, n).amin(-1, keepdim=True)
        chosen = positions == first
        values.append(torch.where(chosen, x, _zero(x)).sum(-1, keepdim=True))
        indices.append(first)
        taken = taken | chosen
    out_dim = dim % self.dim()
    return torch.cat(values, -1).movedim(-1, out_dim), torch.cat(indices, -1).movedim(-1, out_dim)


def _cumsum(self, dim, dtype=None):
    """Running sums along `dim`: out[.., i, ..] = sum_{j <= i} self[.., j, ..], a triangular mask and a sum (a
    router's slot positions, GShard's `cumsum(mask, dim=tokens)`). Its cost is n^2 per row: meant for a group's
    tokens, not a long scan. Integers and booleans sum in int64, as torch's."""
    torch = _torch()
    if dtype is None and not self.is_floating_point() and not self.is_complex():
        dtype = torch.long
    x = self.to(dtype) if dtype is not None else self
    if x.dim() == 0:
        return x.clone()
    moved = x.movedim(dim % x.dim(), -1).unsqueeze(-2)  # [.., 1, n(j)]
    positions = torch.arange(x.shape[dim], device=x.device)
    below = positions.unsqueeze(-1) >= positions  # [n(i), n(j)]: j <= i
    return torch.where(below, moved, _zero(x)).sum(-1).movedim(-1, dim % x.dim())


def one_hot(tensor, num_classes=-1):
    """`F.one_hot` for a given `num_classes` (torch's own checks the indices' range with a data-dependent
    read, which no trace can follow): `tensor[..] == v` as integers. Out-of-range indices give a zero row
    (torch raises)."""
    torch = _torch()
    if num_classes < 0:
        return NotImplemented
    return _one_hot(tensor, num_classes).to(torch.long)


__all__ = ["indexing_decompositions", "one_hot"]
