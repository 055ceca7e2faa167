"""Each pipeline stage's own programs, imported from its forward graph (`stage_split.py`):

    forward   (batch it reads, received values; its parameters, buffers) -> values it sends   (last: loss / M),
              values saved for the backward
    backward  (batch, received, saved, gradients of what it sent; parameters, buffers, grad.<p>)
              -> gradients of what it received (those that are floats), grad.<p> + this micro-batch's
    update    (grad.<p>, parameters, optimizer state, hyperparameters) -> new parameters, new state

The forward and the backward are traced together, once (the forward, then autograd's backward of it), and cut
apart at the values the backward reads of the forward (`stage_partition.py`): a stage keeps a micro-batch's
saved activations from its forward to its backward, which does not run the forward again. The gradients are
accumulated in the program (`grad.<p>` in, `grad.<p>` + this micro-batch's out; zeros before the first), the
last stage's loss divided by the number of micro-batches, so the sum over the micro-batches is torch's
accumulation loop's (`accumulation.py`) and, for a loss that is a mean over samples, the whole batch's step.
The graphs are traced (make_fx, `torch_import.trace`) and imported by torch-mlir like a training step, their
arguments named.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Any

from slicer.viz.remat_memory import RematUnit

from .program import ImportedProgram
from .stage_partition import partition
from .stage_split import StageGraph, Transfer
from .torch_import import ENTRY, finish, torch_dialect, trace
from .torch_lowering import lower

GRAD = "grad."  # prefix of a gradient's name: grad.<parameter> accumulated, grad.<transfer> sent back


@dataclass(frozen=True)
class StagePrograms:
    """The programs of one stage and the names they share: `batch` (the step's batch tensors it reads),
    `received` and `sent` (transfers, in argument and result order), `saved` (what the forward keeps for the
    backward, `stage_partition.py`), `parameters` (trained), `buffers` (read
    only: buffers and frozen parameters), `state` (the optimizer's), `hyper`."""

    index: int
    forward: ImportedProgram
    backward: ImportedProgram
    update: ImportedProgram
    batch: tuple[str, ...]
    received: tuple[Transfer, ...]
    sent: tuple[Transfer, ...]
    saved: tuple[str, ...]
    parameters: tuple[str, ...]
    buffers: tuple[str, ...]
    state: tuple[str, ...]
    hyper: tuple[str, ...]
    remat: tuple[RematUnit, ...] = ()
    """What remat did to each module of the stage a `Remat` tactic names (`stage_partition.py`)."""


def _imported(torch, fx, function, names: list[str], values: list, roles: list[str], results: list[str],
              what: str, pool: Executor, hyperparameters=None) -> Future[ImportedProgram]:
    """`function(*values)` traced and imported as a program whose arguments are `names` with `roles`."""
    inputs = sum(1 for r in roles if r == "input")
    return _program(fx, trace(torch, function, values, what, lines=False), names, values[inputs:], roles, results,
                    what, pool, hyperparameters)


def _program(fx, graph, names: list[str], values: list, roles: list[str], results: list[str], what: str,
             pool: Executor, hyperparameters=None) -> Future[ImportedProgram]:
    """The aten graph `graph` imported as a program whose arguments are `names` with `roles` (the inputs first;
    `values`: an example of every argument after them): torch-mlir's import here, its lowering (a child
    process) and the cleanup in `pool`, while the next graph is traced."""
    raw = torch_dialect(fx, graph)
    inputs = sum(1 for r in roles if r == "input")

    def imported() -> ImportedProgram:
        text = finish(lower(raw, what), what, names, results)
        return ImportedProgram(text, tuple(names), inputs, tuple(values), ENTRY, what, tuple(results), tuple(roles),
                               hyperparameters)

    return pool.submit(imported)


def stage_programs(torch, fx, graph: StageGraph, transfers: dict[str, Transfer], values: dict, batch_names: set[str],
                   trained: set[str], optimizer, microbatches: int, state: dict, hyper: dict,
                   last: bool, pool: Executor, remat: Sequence = ()) -> Callable[[], StagePrograms]:
    """The programs of the stage `graph` (see the module docstring), once `pool` has imported them: call the
    result. `values`: an example of every name its graph reads (the micro-batch's batch tensors and received
    values included); `trained`: the parameters that get gradients; `batch_names`: the step's batch tensors;
    `state`, `hyper`: the optimizer's initial state and hyperparameters by name (all stages'); `remat`: the
    `Remat` tactics whose modules the backward recomputes."""
    module: Any = graph.module
    index = graph.index
    received = tuple(transfers[n] for n in graph.inputs if n in transfers)
    batch = tuple(n for n in graph.inputs if n in batch_names)
    params = tuple(n for n in graph.inputs if n in trained)
    buffers = tuple(n for n in graph.inputs if n not in transfers and n not in params and n not in batch)
    sent = tuple(transfers[n] for n in graph.outputs if n in transfers)
    front = [*batch, *(t.name for t in received)]
    owned = [*params, *buffers]
    back = [t for t in received if t.differentiable]
    grads_in = [] if last else [GRAD + t.name for t in sent]
    accumulated = [GRAD + p for p in params]

    def joint(*args):
        named = dict(zip(front + grads_in + owned + accumulated, args))
        weights = {n: named[n].detach().requires_grad_() for n in params}
        inputs = {t.name: named[t.name].detach().requires_grad_() for t in back}
        out = torch.fx.Interpreter(module).run(*({**named, **weights, **inputs}[n] for n in graph.inputs))
        out = out if isinstance(out, (tuple, list)) else (out,)
        outs = [out[0] / microbatches] if last else list(out)
        given = None if last else [named[GRAD + t.name] for t in sent]
        grads = torch.autograd.grad(outs, [*inputs.values(), *weights.values()], grad_outputs=given,
                                    allow_unused=True, materialize_grads=True)
        own = grads[len(inputs):]
        return (*outs, *grads[:len(inputs)], *(named[GRAD + p] + g for p, g in zip(params, own)))

    what = f"stage {index} of the pipelined step"
    zeros = [torch.zeros_like(values[p]) for p in params]
    sent_values = [] if last else [torch.zeros(t.shape, dtype=getattr(torch, t.dtype)) for t in sent]
    examples = [values[n] for n in front] + sent_values + [values[n] for n in owned] + zeros
    results = ["loss"] if last else [t.name for t in sent]
    joint_graph = trace(torch, joint, examples, f"the forward and backward of {what}", lines=False)
    cut = partition(torch, joint_graph, len(front), len(grads_in), len(owned), len(results), remat)
    saved = [f"s{index}.saved.{k}" for k in range(cut.saved)]
    fwd = _program(fx, cut.forward, front + owned, [values[n] for n in owned],
                   ["input"] * len(front) + ["parameter"] * len(params) + ["buffer"] * len(buffers),
                   results + saved, f"the forward of {what}", pool)
    names = front + saved + grads_in + owned + accumulated
    roles = (["input"] * (len(front) + len(saved) + len(grads_in)) + ["parameter"] * len(params)
             + ["buffer"] * len(buffers) + ["state"] * len(accumulated))
    kept = [n for n, keep in zip(names, cut.kept) if keep]
    bwd = _program(fx, cut.backward, kept, [values[n] for n in owned if n in kept] + zeros,
                   [r for r, keep in zip(roles, cut.kept) if keep], [GRAD + t.name for t in back] + accumulated,
                   f"the backward of {what}", pool)
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
                    + ["hyper"] * len(hyper), [*params, *own_state], f"the update of {what}", pool,
                    optimizer.hyperparameter_values)
    return lambda: StagePrograms(index, fwd.result(), bwd.result(), upd.result(), batch, received, sent,
                                 tuple(saved), params, buffers, tuple(own_state), tuple(hyper), cut.remat)


__all__ = ["GRAD", "StagePrograms", "stage_programs"]
