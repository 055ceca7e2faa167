"""The rows of a sequence-tiled batch merged sequence-major: `[B, S, ..] -> [B*S, ..]` traced as `[S, B, ..]`
merged (context parallelism with a batch of more than one sequence).

A loss over tokens flattens the batch and the sequence into rows (`logits.flatten(0, 1)`, `logits.view(-1, V)`,
`targets.view(-1)`). With the sequence tiled, S is the minor dim of that merge, which a layout cannot tile: the
logits and targets were gathered whole on every device. While a context-parallel step is traced, such a merge of
a `[B, S, ..]` tensor (B > 1, S the sequence's length) is made of its transpose instead, so that S is the major
dim and each device's rows are its own tokens. The rows come in another order (s-major), the same for every
tensor merged this way: a loss that reduces over the rows (a mean, a sum) is the same, which `context_import.py`
checks in torch before the step is imported so. `F.linear` of such a tensor (torch merges its leading dims into
rows, forward and backward) is computed on the transpose and transposed back: the same values.
"""

from __future__ import annotations


def sequence_major(seq: int, func, tensor, *args, **kwargs):
    """`func(tensor, *args, **kwargs)` (a flatten, view or reshape), made of `tensor.transpose(0, 1)` when it
    merges dims 0 and 1 of a `[B, S, ..]` tensor (B > 1, S = `seq`) into one; NotImplemented for another tensor."""
    shape = tuple(getattr(tensor, "shape", ()))
    if len(shape) < 2 or shape[0] < 2 or shape[1] != seq:
        return NotImplemented
    merged = func(tensor, *args, **kwargs)
    if tuple(merged.shape) != (shape[0] * seq, *shape[2:]):
        return merged
    return tensor.transpose(0, 1).reshape(merged.shape)


def sequence_major_linear(seq: int, func, tensor, *args, **kwargs):
    """`F.linear(tensor, ...)` of a `[B, S, .., D]` tensor (B > 1, S = `seq`) made on its transpose `[S, B, ..]`
    and transposed back (the same values: torch's linear then merges S, B into rows S-major); NotImplemented for
    another tensor."""
    shape = tuple(getattr(tensor, "shape", ()))
    if len(shape) < 3 or shape[0] < 2 or shape[1] != seq:
        return NotImplemented
    return func(tensor.transpose(0, 1), *args, **kwargs).transpose(0, 1)


__all__ = ["sequence_major", "sequence_major_linear"]
