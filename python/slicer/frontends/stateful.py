"""Modules with state in a training step: the buffers a forward updates (batch norm's running statistics in
training mode) and dropout's random state, as arguments of the step whose next values are results.

Buffers. In training mode `nn.BatchNorm*` writes its running mean and variance (and counts `num_batches_tracked`)
in place. The step passes every buffer to the model as a copy (`clone`), traces the forward, and returns the
copies; in the traced graph (functionalized, `torch_import.trace`) a copy nobody wrote is still `clone(argument)`,
and those outputs are dropped (`prune_outputs`): the buffers left are the written ones, results named like their
arguments, which a session feeds back like optimizer state (`SessionPlan.feeds`). Their values are torch's: the
statistics over the whole batch the program computes (the program is global: under data parallel a reduction
over the tiled batch dim is an all_reduce, so this is SyncBatchNorm), the running variance unbiased (n / (n - 1)).

Details: docs/module-notes.md, `frontends/stateful.py`.
"""

from __future__ import annotations

import contextlib
import functools

from .randomness import random_decompositions


def stateful_decompositions(torch) -> dict:
    """Batch norm's decompositions (torch._decomp) and dropout's (`randomness.random_decompositions`)."""
    from torch._decomp import get_decompositions  # optional dependency, like torch itself

    aten = torch.ops.aten
    torch_table = get_decompositions([aten.native_batch_norm, aten.native_batch_norm_backward])
    evaluation = torch_table[aten.native_batch_norm.default]

    def native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps):
        if training:
            return _batch_norm_training(torch, input, weight, bias, running_mean, running_var, momentum, eps)
        return evaluation(input, weight, bias, running_mean, running_var, training, momentum, eps)

    table = {**torch_table, aten.native_batch_norm.default: native_batch_norm, aten.squeeze.dims: _squeeze_dims}
    table.update(random_decompositions(torch))
    return table


def _squeeze_dims(self, dims):
    """`aten.squeeze.dims` as a reshape. torch-mlir's table makes it `prims.squeeze`, an op functionalization
    refuses ("a custom (non-ATen) operator whose output has alias annotations"), and a step is functionalized
    whenever it writes a temporary: dropout's `bernoulli_`, batch norm's running statistics (SDPA with
    dropout_p squeezes, and failed so)."""
    dims = [dims] if isinstance(dims, int) else dims
    dims = {d % self.dim() for d in dims} if self.dim() else set()
    return self.reshape([n for d, n in enumerate(self.shape) if not (d in dims and n == 1)])


def _batch_norm_training(torch, input, weight, bias, running_mean, running_var, momentum: float, eps: float):
    """`aten.native_batch_norm` in training mode: (output, batch mean, inverse deviation), the running statistics
    written in place (`copy_`, which the trace functionalizes into new values). torch's decomposition
    (torch._decomp `native_batch_norm_helper`) in the same order of operations, with `reshape` where it
    squeezes: `torch.squeeze(x, dims)` is traced as `prims.squeeze` (torch-mlir's table), an op that
    functionalization refuses. (The op itself cannot be kept: its schema does not say it writes the running
    statistics, so functionalization would drop the update.)"""
    channels = input.shape[1]
    view = [1, channels] + [1] * (input.dim() - 2)
    mean, biased_var = _batch_moments(torch, input, view)
    rstd = torch.rsqrt(biased_var + eps)
    output = (input - mean) * rstd
    save_mean, save_rstd = mean.reshape(channels), rstd.reshape(channels)
    if running_mean is not None:
        running_mean.copy_(momentum * save_mean + (1 - momentum) * running_mean)
    if running_var is not None:
        n = input.numel() / channels
        unbiased_var = biased_var.reshape(channels) * (n / (n - 1))
        running_var.copy_(momentum * unbiased_var + (1 - momentum) * running_var)
    if weight is not None:
        output = output * weight.flatten().reshape(view)
    if bias is not None:
        output = output + bias.flatten().reshape(view)
    return output.to(input.dtype), save_mean.to(input.dtype), save_rstd.to(input.dtype)


def _batch_moments(torch, input, view: list[int]):
    """The batch's mean and biased variance per channel, shaped `view` (f32 for narrow inputs), in one pass over
    `input`: the mean as `torch.var_mean`'s decomposition computes it (a sum in the compute type over the count),
    the variance E[x^2] - E[x]^2 from sums of x and x * x in f64. `var_mean`'s variance is a second pass (the
    squared deviations from the mean), another read of the activation and, distributed, another all_reduce that
    must wait for the first; these sums are ready together (the bucketing pass all_reduces them as one). In f64
    the one-pass form loses nothing an f32 variance shows unless |mean| / std exceeds ~1e4."""
    dims = [0, *range(2, input.dim())]
    compute = input.to(torch.float32) if input.dtype in (torch.float16, torch.bfloat16) else input
    count = input.numel() // input.shape[1]
    mean = compute.sum(dims) / count
    wide = input.to(torch.float64)
    wide_mean = wide.sum(dims) / count
    var = torch.clamp((wide * wide).sum(dims) / count - wide_mean * wide_mean, min=0.0)
    return mean.reshape(view), var.to(compute.dtype).reshape(view)


@contextlib.contextmanager
def cumulative_averages(torch, model):
    """While tracing, batch norm modules of `model` in training mode with `momentum=None` compute their cumulative
    average factor as a tensor (`_cumulative_batch_norm`) instead of reading it with `float()`."""
    patched = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)
               and m.training and m.momentum is None and m.track_running_stats and m.running_mean is not None]
    for module in patched:
        module.forward = functools.partial(_cumulative_batch_norm, torch, module)
    try:
        yield
    finally:
        for module in patched:
            del module.forward


def _cumulative_batch_norm(torch, module, input):
    """`_BatchNorm.forward` in training mode with `momentum=None`: the batch's statistics (`F.batch_norm` with
    momentum 1 into zeroed buffers), then running = factor * batch + (1 - factor) * running, factor =
    1 / num_batches_tracked, as torch computes it with the factor read as a Python float."""
    module._check_input_dim(input)
    module.num_batches_tracked.add_(1)
    factor = 1.0 / module.num_batches_tracked
    batch_mean, batch_var = torch.zeros_like(module.running_mean), torch.zeros_like(module.running_var)
    output = torch.nn.functional.batch_norm(input, batch_mean, batch_var, module.weight, module.bias, True, 1.0,
                                            module.eps)
    module.running_mean.copy_(factor * batch_mean + (1 - factor) * module.running_mean)
    module.running_var.copy_(factor * batch_var + (1 - factor) * module.running_var)
    return output


def _is_copy_of(torch, node, placeholder) -> bool:
    """Is `node` `clone(placeholder)` (through aliases): a copy of the argument nobody wrote?"""
    aten = torch.ops.aten
    if node.op != "call_function" or node.target != aten.clone.default:
        return False
    source = node.args[0]
    while getattr(source, "op", None) == "call_function" and source.target == aten.alias.default:
        source = source.args[0]
    return source is placeholder


def prune_outputs(torch, graph, copies: dict[int, int], random_arg: int) -> tuple[list[int], bool]:
    """Drop from `graph` (a traced step, changed in place) the outputs that return an argument unchanged:
    `copies` maps an output position to the argument position it copies unless written. Then, if the
    argument at `random_arg` (the random state) has no user, remove it. Returns the kept positions of `copies`
    and whether the random state is used."""
    placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
    output = next(n for n in graph.graph.nodes if n.op == "output")
    results = list(output.args[0])
    dropped = {o for o, a in copies.items() if _is_copy_of(torch, results[o], placeholders[a])}
    output.args = (tuple(r for i, r in enumerate(results) if i not in dropped),)
    graph.graph.eliminate_dead_code()
    random = placeholders[random_arg]
    used = bool(random.users)
    if not used:
        graph.graph.erase_node(random)
    graph.recompile()
    return [o for o in copies if o not in dropped], used


__all__ = ["cumulative_averages", "prune_outputs", "stateful_decompositions"]
