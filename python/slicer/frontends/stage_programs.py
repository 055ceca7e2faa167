"""Each pipeline stage's own programs, imported from its forward graph (`stage_split.py`):

    forward   (batch it reads, received values; its parameters, buffers) -> values it sends   (last: loss / M)
    backward  (batch, received, gradients of what it sent; parameters, buffers, grad.<p>)
              -> gradients of what it received (those that are floats), grad.<p> + this micro-batch's
    update    (parameters, grad.<p>, optimizer state, hyperparameters) -> new parameters, new state

The backward recomputes the stage's forward from its received values (GPipe's re-materialisation at stage
granularity): a stage keeps only the values it received for the micro-batches in flight, not their
activations, and each backward is one forward and one backward of the stage. The gradients are accumulated in
the program (`grad.<p>` in, `grad.<p>` + this micro-batch's out; zeros before the first), the last stage's loss
divided by the number of micro-batches, so the sum over the micro-batches is torch's accumulation loop's
(`accumulation.py`) and, for a loss that is a mean over samples, the whole batch's step. Each program is
traced (make_fx, `torch_import.trace`) and imported by torch-mlir like a training step, its arguments named.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .program import ImportedProgram
from .stage_split import StageGraph, Transfer
from .torch_import import ENTRY, finish, import_graph, trace

GRAD = "grad."  # prefix of a gradient's name: grad.<parameter> accumulated, grad.<transfer> sent back


@dataclass(frozen=True)
class StagePrograms:
    """The programs of one stage and the names they share: `batch` (the step's batch tensors it reads),
    `received` and `sent` (transfers, in argument and result order), `parameters` (trained), `buffers` (read
    only: buffers and frozen parameters), `state` (the optimizer's), `hyper`."""

    index: int
    forward: ImportedProgram
    backward: ImportedProgram
    update: ImportedProgram
    batch: tuple[str, ...]
    received: tuple[Transfer, ...]
    sent: tuple[Transfer, ...]
    parameters: tuple[str, ...]
    buffers: tuple[str, ...]
    state: tuple[str, ...]
    hyper: tuple[str, ...]


def _imported(torch, fx, function, names: list[str], values: list, roles: list[str], results: list[str],
              what: str, hyperparameters=None) -> ImportedProgram:
    """`function(*values)` traced and imported as a program whose arguments are `names` with `roles`."""
    graph = trace(torch, function, values, what)
    text = finish(import_graph(fx, graph, what), what, names, results)
    inputs = sum(1 for r in roles if r == "input")
    return ImportedProgram(text, tuple(names), inputs, tuple(values[inputs:]), ENTRY, what, tuple(results),
                           tuple(roles), hyperparameters)


def stage_programs(torch, fx, graph: StageGraph, transfers: dict[str, Transfer], values: dict, batch_names: set[str],
                   trained: set[str], optimizer, microbatches: int, state: dict, hyper: dict,
                   last: bool) -> StagePrograms:
    """The programs of the stage `graph` (see the module docstring). `values`: an example of every name its
    graph reads (the micro-batch's batch tensors and received values included); `trained`: the parameters that
    get gradients; `batch_names`: the step's batch tensors; `state`, `hyper`: the optimizer's initial state and
    hyperparameters by name (all stages')."""
    module: Any = graph.module
    index = graph.index
    received = tuple(transfers[n] for n in graph.inputs if n in transfers)
    batch = tuple(n for n in graph.inputs if n in batch_names)
    params = tuple(n for n in graph.inputs if n in trained)
    buffers = tuple(n for n in graph.inputs if n not in transfers and n not in params and n not in batch)
    sent = tuple(transfers[n] for n in graph.outputs if n in transfers)
    front = [*batch, *(t.name for t in received)]
    owned = [*params, *buffers]

    def run(named: dict):
        out = module(*(named[n] for n in graph.inputs))
        out = out if isinstance(out, (tuple, list)) else (out,)
        return [out[0] / microbatches] if last else list(out)

    def forward(*args):
        return tuple(run(dict(zip(front + owned, args))))

    what = f"stage {index} of the pipelined step"
    fwd = _imported(torch, fx, forward, front + owned, [values[n] for n in front + owned],
                    ["input"] * len(front) + ["parameter"] * len(params) + ["buffer"] * len(buffers),
                    ["loss"] if last else [t.name for t in sent], f"the forward of {what}")
    back = [t for t in received if t.differentiable]
    grads_in = [] if last else [GRAD + t.name for t in sent]
    accumulated = [GRAD + p for p in params]

    def backward(*args):
        named = dict(zip(front + grads_in + owned + accumulated, args))
        weights = {n: named[n].detach().requires_grad_() for n in params}
        inputs = {t.name: named[t.name].detach().requires_grad_() for t in back}
        outs = run({**named, **weights, **inputs})
        wrt = [*inputs.values(), *weights.values()]
        given = None if last else [named[GRAD + t.name] for t in sent]
        grads = torch.autograd.grad(outs, wrt, grad_outputs=given, allow_unused=True, materialize_grads=True)
        own = grads[len(inputs):]
        return (*grads[:len(inputs)], *(named[GRAD + p] + g for p, g in zip(params, own)))

    zeros = [torch.zeros_like(values[p]) for p in params]
    sent_values = [] if last else [torch.zeros(t.shape, dtype=getattr(torch, t.dtype)) for t in sent]
    bwd = _imported(torch, fx, backward, front + grads_in + owned + accumulated,
                    [values[n] for n in front] + sent_values + [values[n] for n in owned] + zeros,
                    ["input"] * (len(front) + len(grads_in)) + ["parameter"] * len(params)
                    + ["buffer"] * len(buffers) + ["state"] * len(accumulated),
                    [GRAD + t.name for t in back] + accumulated, f"the backward of {what}")
    own_state = [n for n in state if n.partition(".")[2] in params] + list(optimizer.shared_state())

    def update(*args):
        named = dict(zip([*accumulated, *params, *own_state, *hyper], args))
        new_params, new_state = optimizer.update({p: named[p] for p in params},
                                                 {p: named[GRAD + p] for p in params},
                                                 {s: named[s] for s in own_state}, {h: named[h] for h in hyper})
        return (*(new_params[p] for p in params), *(new_state[s] for s in own_state))

    upd = _imported(torch, fx, update, [*accumulated, *params, *own_state, *hyper],
                    zeros + [values[p] for p in params] + [state[s] for s in own_state] + list(hyper.values()),
                    ["input"] * len(accumulated) + ["parameter"] * len(params) + ["state"] * len(own_state)
                    + ["hyper"] * len(hyper), [*params, *own_state], f"the update of {what}",
                    optimizer.hyperparameter_values)
    return StagePrograms(index, fwd, bwd, upd, batch, received, sent, params, buffers, tuple(own_state),
                         tuple(hyper))


__all__ = ["GRAD", "StagePrograms", "stage_programs"]
