"""Gradient accumulation in a training step: `training_step(..., microbatches=k)` runs the forward and backward
passes over k micro-batches, one after the other, and makes one optimizer update from their summed gradients.

What it computes is torch's accumulation loop (with `torch.optim`, foreach=False):

    for i in range(k):
        loss_i = loss_fn(model, *(t[i::k] for t in batch)) / k
        loss_i.backward()                          # .grad accumulates: the first assigns, the others add
    clip_grad_norm_(...)                           # if asked for (clipping.py), on the accumulated gradients
    optimizer.step()

Details: docs/module-notes.md, `frontends/accumulation.py`.
"""

from __future__ import annotations

from slicer.core.errors import FrontendError

from .torch_import import mark_backward


def check_microbatches(microbatches, batch) -> None:
    """FrontendError unless `microbatches` is an integer >= 1 that divides dim 0 of every tensor of `batch`."""
    if isinstance(microbatches, bool) or not isinstance(microbatches, int) or microbatches < 1:
        raise FrontendError(f"training_step: microbatches must be an integer >= 1 (the micro-batches a step "
                            f"accumulates gradients over), got {microbatches!r}")
    if microbatches == 1:
        return
    for index, tensor in enumerate(batch):
        rows = tensor.shape[0] if tensor.dim() else None
        if rows is None or rows % microbatches:
            got = "a 0-d tensor" if rows is None else f"dim 0 of size {rows}"
            raise FrontendError(f"training_step: microbatches={microbatches} cuts every batch tensor into "
                                f"{microbatches} equal micro-batches along dim 0, but batch tensor #{index} has "
                                f"{got}; pass a batch whose dim 0 is a multiple of {microbatches}, or a "
                                "microbatches that divides it")


def micro_batch(tensor, micro: int, count: int):
    """Micro-batch `micro` of `count` of `tensor`: its rows micro, micro + count, ... (dim 0), as
    `reshape(B / count, count, ...)[:, micro]` (see the module docstring for why not a contiguous chunk)."""
    if count == 1:
        return tensor
    return tensor.reshape(tensor.shape[0] // count, count, *tensor.shape[1:])[:, micro]


def fence_count(count: int, weights: int) -> int:
    """How many fences `accumulated_gradients` returns for `count` micro-batches of `weights` gradients: the
    partial sums after micro-batches 2 .. count-1 (none for one or two micro-batches)."""
    return max(0, count - 2) * weights


def accumulated_gradients(torch, loss_of, batch, weights: list, count: int, stream, guard, dtypes=None):
    """(the step's loss, the gradient of each of `weights`, the fences) over `count` micro-batches of `batch`,
    as torch's accumulation loop computes them (module docstring), each micro-batch's gradients converted to
    `dtypes` (one a weight, if given: a compute copy's widened to its f32 master's) before they are summed:
    `loss_of(*micro_batch)` runs the forward
    (the loss function under `guard`, whose clipping requests each trace records anew) and returns the checked
    scalar loss; `stream` (`randomness.RandomStream`) is told which micro-batch it draws for. The fences are
    the partial sums of the gradients before the last micro-batch's: the traced step returns them after its
    results, so that the import's elementwise fusion keeps each addition where it is (`cleanup.py`, "Fences")
    instead of merging all of them into one at the end, which would keep every micro-batch's gradients live."""
    total, grads, fences = None, None, []
    for micro in range(count):
        guard.clips = []  # the same requests each micro-batch: the last trace's are applied once
        if count > 1:
            stream.start_micro_batch(micro, count, batch[0].shape[0] // count)
        loss = loss_of(*(micro_batch(t, micro, count) for t in batch))
        if count > 1:
            loss = loss / count
        if loss.requires_grad:
            mark_backward(torch, loss)  # the backward's ops located at the lines of the forward's
            new = torch.autograd.grad(loss, weights, allow_unused=True, materialize_grads=True)
        else:  # no trained parameter reaches the loss
            new = [torch.zeros_like(w) for w in weights]
        if dtypes is not None:
            new = [g.to(d) for g, d in zip(new, dtypes)]
        loss = loss.detach()
        total = loss if total is None else total + loss
        if grads is not None:
            fences += grads
        grads = list(new) if grads is None else [g + n for g, n in zip(grads, new)]
    return total, grads, fences[len(weights):]


__all__ = ["accumulated_gradients", "check_microbatches", "fence_count", "micro_batch"]
