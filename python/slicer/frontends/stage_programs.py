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
    own_state = _own_state(optimizer, list(params))
    names = [*accumulated, *params, *own_state, *hyper]
    given = dict(zip(names, zeros + [values[p] for p in params] + [state[s] for s in own_state] + list(hyper.values())))
    upd = _program(fx, _update_graph(torch, optimizer, list(params), list(hyper), given, f"the update of {what}"),
                   names, [given[n] for n in names[len(accumulated):]],
                   ["input"] * len(accumulated) + ["parameter"] * len(params) + ["state"] * len(own_state)
                   + ["hyper"] * len(hyper), [*params, *own_state], f"the update of {what}", pool,
                   optimizer.hyperparameter_values)
    return lambda: StagePrograms(index, fwd.result(), bwd.result(), upd.result(), batch, received, sent,
                                 tuple(saved), params, buffers, tuple(own_state), tuple(hyper), cut.remat)


def _own_state(optimizer, params: list[str]) -> list[str]:
    return [n for p in params for n in optimizer.state_names(p)] + list(optimizer.shared_state())


def _update_function(optimizer, params: list[str], hyper: list[str]):
    """The update of `params` as a function of (their gradients, themselves, their state and the shared state,
    `hyper`), returning (new parameters, new state), in `_own_state`'s order."""
    own = _own_state(optimizer, params)

    def update(*args):
        named = dict(zip([*(GRAD + p for p in params), *params, *own, *hyper], args))
        new_params, new_state = optimizer.update({p: named[p] for p in params}, {p: named[GRAD + p] for p in params},
                                                 {s: named[s] for s in own}, {h: named[h] for h in hyper})
        return (*(new_params[p] for p in params), *(new_state[s] for s in own))

    return update


def _update_graph(torch, optimizer, params: list[str], hyper: list[str], examples: dict, what: str):
    """The aten graph of the update of `params` (arguments and results as `_update_function`'s; `examples`: a
    value of each argument by name), traced on one parameter of each shape and dtype and its nodes copied for
    the others. SGD and AdamW update each parameter by the same ops on its own gradient and state (and on the
    shared state and hyperparameters, whose nodes are made once): tracing every parameter would make the same
    nodes again, most of the work of importing a stage's update. Traced whole if a node reads two parameters."""
    groups: dict[tuple, list[str]] = {}
    for p in params:
        groups.setdefault((tuple(examples[p].shape), examples[p].dtype), []).append(p)
    first_of = {p: group[0] for group in groups.values() for p in group}
    firsts = [group[0] for group in groups.values()]

    def traced(chosen: list[str]):
        names = [*(GRAD + p for p in chosen), *chosen, *_own_state(optimizer, chosen), *hyper]
        graph = trace(torch, _update_function(optimizer, chosen, hyper), [examples[n] for n in names], what,
                      lines=False)
        return graph, dict(zip(names, (n for n in graph.graph.nodes if n.op == "placeholder")))

    template, placeholders = traced(firsts)
    if len(firsts) == len(params):
        return template
    arguments = {p: [GRAD + p, p, *optimizer.state_names(p)] for p in params}
    shared = [*optimizer.shared_state(), *hyper]
    owner = {placeholders[n]: p for p in firsts for n in arguments[p]} | {placeholders[n]: None for n in shared}
    for node in template.graph.nodes:
        if node.op not in ("placeholder", "output"):
            owners = {owner[i] for i in node.all_input_nodes} - {None}
            if len(owners) > 1:
                return traced(params)[0]
            owner[node] = owners.pop() if owners else None
    graph = torch.fx.Graph()
    made: dict = {}
    for name in [*(GRAD + p for p in params), *params, *_own_state(optimizer, params), *hyper]:
        made[name] = graph.placeholder(f"arg{len(made)}")
    common = {placeholders[n]: made[n] for n in shared}
    copies = {p: {placeholders[a]: made[b] for a, b in zip(arguments[first_of[p]], arguments[p])} for p in params}
    for a, b in [(n, n) for n in shared] + [(a, b) for p in params for a, b in zip(arguments[first_of[p]],
                                                                                   arguments[p])]:
        made[b].meta = dict(placeholders[a].meta)
    body = [n for n in template.graph.nodes if n.op not in ("placeholder", "output")]
    for node in body:  # the shared nodes once, then each parameter's copy of its group's first parameter's
        if owner[node] is None:
            common[node] = graph.node_copy(node, lambda n: common[n])
    for p in params:
        for node in body:
            if owner[node] == first_of[p]:
                copies[p][node] = graph.node_copy(node, lambda n, p=p: copies[p].get(n) or common[n])
    results = dict(zip([*firsts, *_own_state(optimizer, firsts)], next(n for n in template.graph.nodes
                                                                      if n.op == "output").args[0]))
    wanted = [(p, first_of[p]) for p in params]  # each result: the parameter it is of, its group's first's result
    wanted += [(p, a) for p in params for a in optimizer.state_names(first_of[p])]
    outputs = [copies[p].get(results[theirs]) or common[results[theirs]] for p, theirs in wanted]
    graph.output(tuple(outputs + [common[results[n]] for n in optimizer.shared_state()]))
    return torch.fx.GraphModule(template, graph)


__all__ = ["GRAD", "StagePrograms", "stage_programs"]
