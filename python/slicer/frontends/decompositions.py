"""The aten decompositions applied while a PyTorch program is traced, so that everything it computes lowers to
linalg on tensors (what Slicer partitions and compiles).

torch-mlir's own table (`get_decomposition_table`) is the base; what Slicer adds on top of it:
docs/module-notes.md, `frontends/decompositions.py`.
"""

from __future__ import annotations

from .decomp_convolution import convolution_decompositions
from .decomp_indexing import indexing_decompositions
from .decomp_prims import prims_decompositions

# torch.nn's reductions as aten passes them (torch/_decomp: Reduction)
NONE, MEAN, SUM = 0, 1, 2


def decompositions(torch) -> dict:
    """The decomposition table for tracing (torch.export's `run_decompositions`, or `make_fx`)."""
    from torch._decomp import get_decompositions  # optional dependency, like torch itself
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table

    aten = torch.ops.aten
    table = dict(get_decomposition_table())
    table.update(get_decompositions([aten.gelu]))
    table[aten.embedding_dense_backward.default] = _embedding_dense_backward
    table[aten.nll_loss_forward.default] = _nll_loss_forward
    table[aten.nll_loss_backward.default] = _nll_loss_backward
    table[aten.pow.Tensor_Scalar] = _pow_tensor_scalar
    table.update(prims_decompositions(torch))  # prims views and copies as aten ops (decomp_prims.py)
    table.update(indexing_decompositions(torch))  # topk, gather, scatter, index_* one-hot (decomp_indexing.py)
    table.update(convolution_decompositions(torch))  # conv gradients as plain convolutions (decomp_convolution.py)
    return table


def _pow_tensor_scalar(self, exponent):
    """A floating tensor to an integral power without `math.fpowi` (see the module docstring); NotImplemented
    (the op kept: `math.powf`) for a float exponent torch's kernel does not special-case, and integer tensors."""
    if not self.is_floating_point() or isinstance(exponent, (bool, complex)):
        return NotImplemented
    special = {0: lambda x: x.new_ones(x.shape), 1: lambda x: x.clone(), 2: lambda x: x * x,
               3: lambda x: x * x * x, -1: lambda x: 1 / x, -2: lambda x: 1 / (x * x)}
    if float(exponent) in special:
        return special[int(exponent)](self)
    if isinstance(exponent, int):
        return self.pow(float(exponent))  # a float exponent: math.powf (this function leaves it)
    return NotImplemented


def _one_hot(torch, index, classes: int):
    """[*index.shape, classes] booleans: index[..] == v (False for out-of-range indices, as torch skips them)."""
    return index.unsqueeze(-1) == torch.arange(classes, dtype=index.dtype, device=index.device)


def _embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    """The gradient of an embedding's weight [num_weights, D]: the rows of `grad_output` added into the rows
    their indices name, as `onehot^T @ grad` (no padding row; rows scaled by 1/count when asked)."""
    import torch  # optional dependency; only called while torch traces

    rows = grad_output.reshape(-1, grad_output.shape[-1])
    flat = indices.reshape(-1).to(torch.long)
    onehot = _one_hot(torch, flat, num_weights) & (flat != padding_idx).unsqueeze(-1)
    mask = onehot.to(rows.dtype)
    if scale_grad_by_freq:
        counts = mask.sum(0)  # tokens per row of the weight
        rows = rows / (mask @ counts).clamp(min=1.0).unsqueeze(-1)
    return mask.t() @ rows


def _nll_loss_forward(self, target, weight, reduction, ignore_index):
    """torch's `_nll_loss_forward` (torch/_decomp/decompositions.py) with its gathers as one-hot sums."""
    import torch  # optional dependency; only called while torch traces

    channel = 1 if self.dim() > 1 else 0
    if weight is not None:
        shape = [1] * self.dim()
        shape[channel] = weight.shape[0]
        self = self * weight.view(shape)
    valid = target != ignore_index
    onehot = _one_hot(torch, torch.where(valid, target, 0), self.shape[channel])
    zero = torch.zeros((), dtype=self.dtype, device=self.device)
    result = torch.where(valid, -torch.where(onehot, self, zero).sum(channel), zero)
    if reduction == NONE and self.dim() > 1:
        return result, self.new_full((), 0.0)
    if weight is not None:
        total_weight = torch.where(valid, torch.where(onehot, weight.expand(self.shape), zero).sum(channel),
                                   zero).sum()
    else:
        total_weight = valid.sum().to(self)
    if reduction == SUM:
        result = result.sum()
    elif reduction == MEAN:
        result = result.sum() / total_weight
    return result, total_weight


def _nll_loss_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight):
    """torch's `_nll_loss_backward` with its scatter of -1 at the targets as a one-hot select."""
    import torch  # optional dependency; only called while torch traces

    channel = 1 if self.dim() > 1 else 0
    if reduction == MEAN:
        grad_output = grad_output / total_weight
    if self.dim() == 1 and target.dim() > 0:
        target = target[0]  # as the C++ kernel: an unbatched input reads target[0]
    valid = (target != ignore_index).unsqueeze(channel)
    onehot = _one_hot(torch, torch.where(target != ignore_index, target, 0), self.shape[channel])
    if self.dim() == 1:
        onehot = onehot.reshape(self.shape)
    if self.dim() > grad_output.dim() > 0:
        grad_output = grad_output.unsqueeze(channel)
    if weight is not None:
        shape = [1] * self.dim()
        shape[channel] = weight.shape[0]
        grad_output = grad_output * weight.reshape(shape)
    zero = torch.zeros((), dtype=self.dtype, device=self.device)
    grad_output = torch.where(valid, grad_output, zero)
    return torch.where(onehot, -grad_output, zero).expand(self.shape)


__all__ = ["decompositions"]
