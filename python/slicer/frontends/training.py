"""A PyTorch training step as one Slicer program: `slicer.training_step(model, loss_fn, *batch, optimizer=...)`.

    step = slicer.training_step(model, lambda m, x, y: F.mse_loss(m(x), y), x, y, optimizer=slicer.SGD(lr=0.1))
    prog = slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=[slicer.Tile(arg="x", dim=0, axes="x")])
    loss, *new = prog.run(x, y)      # one step: the batch only, parameters and optimizer state are bound

The program computes the loss, its gradients (autograd's backward) and the optimizer's update (`optimizers.py`)
in one function, traced into aten ops with make_fx and imported by torch-mlir's fx importer (`torch_import.py`).
Arguments, each named (`slicer.name`) and with a role (`ImportedProgram.arg_roles`):

    batch       the tensors after the model in `loss_fn(model, *batch)`, named like loss_fn's parameters  "input"
    parameters  `model.named_parameters()`                                                               "parameter"
    buffers     `model.named_buffers()` (read, not updated)                                            "buffer"
    state       `momentum.<param>` (SGD with momentum); `exp_avg.<param>`, `exp_avg_sq.<param>`, `step`  "state"

Results: `loss`, then the new value of every trained parameter and of every state tensor, named like their
arguments (`result_names`, and `slicer.name` in the entry function's `res_attrs`): feed result `w` back as
argument `w` for the next step. The bound values (`parameters`) are the module's own tensors and the initial
state (zeros, step 0). Parameters with `requires_grad=False` are arguments but neither trained nor returned.
"""

from __future__ import annotations

import inspect

from slicer.core.errors import FrontendError

from .optimizers import SGD, AdamW
from .program import ImportedProgram
from .torch_import import (ENTRY, finish, first_line, import_graph, load_torch, raise_if_data_dependent,
                           trace)

LOSS = "loss"


def training_step(model, loss_fn, *example_batch, optimizer, cleanup: bool = True) -> ImportedProgram:
    """Import one training step of `model` (a torch.nn.Module): the loss `loss_fn(model, *batch)` (a scalar
    tensor), its gradients with respect to the parameters and the update `optimizer` (`slicer.SGD` or
    `slicer.AdamW`) makes, traced on `example_batch` (tensors; their shapes are the program's). See the module
    docstring for the arguments and results. Raises FrontendError for a bad model, loss function, batch or
    optimizer, and when the step cannot be traced or imported."""
    torch, fx = load_torch()
    _check(torch, model, loss_fn, example_batch, optimizer)
    params = dict(model.named_parameters())
    buffers = {n: b for n, b in model.named_buffers() if n not in params}
    trained = [n for n, p in params.items() if p.requires_grad]
    if not trained:
        raise FrontendError(f"{_what(model)} has no parameter that requires grad: nothing to train")
    state = {n: torch.zeros_like(params[p].detach()) for p in trained for n in optimizer.state_names(p)}
    state.update({n: torch.zeros((), dtype=torch.float32) for n in optimizer.shared_state()})
    names = [*params, *buffers, *state]
    batch_names = _batch_names(loss_fn, len(example_batch), set(names) | {LOSS})
    clash = sorted((set(params) | set(buffers)) & (set(state) | {LOSS}))
    if clash:
        raise FrontendError(f"{_what(model)} has parameters or buffers named like the optimizer's state or the loss "
                            f"({', '.join(clash)}), which name the step's arguments and results; rename them")
    step = _step_function(torch, model, loss_fn, optimizer, len(example_batch), list(params), list(buffers),
                          trained, list(state))
    values = [t.detach() for t in (*params.values(), *buffers.values())] + list(state.values())
    what = f"the training step of {_what(model)}"
    try:
        text = import_graph(fx, trace(torch, step, [*example_batch, *values]), what)
    except FrontendError:
        raise
    except Exception as exc:  # torch's tracing and torch-mlir raise many kinds; the first line says what failed
        raise_if_data_dependent(exc, what)  # .item() and the like: say at which line
        raise FrontendError(f"{what} could not be traced and imported: {first_line(exc)} (the loss function must "
                            "compute a scalar loss from the model's outputs with torch operations, and modules "
                            "that update buffers in training mode, e.g. batch norm, need .eval())") from exc
    arg_names = (*batch_names, *names)
    result_names = (LOSS, *trained, *state)
    text = finish(text, what, arg_names, result_names, cleanup=cleanup, training=model.training)
    roles = (("input",) * len(batch_names) + ("parameter",) * len(params) + ("buffer",) * len(buffers)
             + ("state",) * len(state))
    return ImportedProgram(text, arg_names, len(batch_names), tuple(values), ENTRY, what,
                           result_names=result_names, arg_roles=roles)


def _what(model) -> str:
    return f"the {type(model).__module__}.{type(model).__qualname__} module"


def _check(torch, model, loss_fn, batch, optimizer) -> None:
    """FrontendError, saying what to pass instead, for arguments `training_step` cannot use."""
    if not isinstance(model, torch.nn.Module):
        raise FrontendError(f"training_step trains a torch.nn.Module, not a {type(model).__name__}; pass the "
                            "model first, then the loss function")
    if not callable(loss_fn):
        raise FrontendError(f"training_step: loss_fn must be a function loss_fn(model, *batch) returning the loss, "
                            f"not a {type(loss_fn).__name__}")
    if not batch:
        raise FrontendError("training_step needs an example batch: training_step(model, loss_fn, *batch, "
                            "optimizer=...), the tensors loss_fn takes after the model")
    for index, value in enumerate(batch):
        if not isinstance(value, torch.Tensor):
            raise FrontendError(f"training_step: batch tensor #{index} is a {type(value).__name__}, not a "
                                "torch.Tensor; pass the batch as tensors (torch.as_tensor), and fix other options "
                                "inside loss_fn (e.g. with functools.partial)")
    if not isinstance(optimizer, (SGD, AdamW)):
        raise FrontendError(f"training_step: optimizer must be slicer.SGD(lr, ...) or slicer.AdamW(lr, ...), not a "
                            f"{type(optimizer).__name__} (torch.optim optimizers keep their state outside the "
                            "program: give their settings to slicer.SGD or slicer.AdamW)")


def _batch_names(loss_fn, count: int, taken: set[str]) -> list[str]:
    """Names of the batch tensors: loss_fn's positional parameters after the model (`input<i>` past them, e.g.
    for `*batch`), prefixed `input.` where a parameter, buffer, state tensor or the loss has the name."""
    try:
        params = [p.name for p in inspect.signature(loss_fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):  # a builtin or C function without a signature
        params = []
    names = params[1:count + 1]
    names += [f"input{i}" for i in range(len(names), count)]
    return [n if n not in taken else f"input.{n}" for n in names]


def _step_function(torch, model, loss_fn, optimizer, num_batch: int, params: list[str], buffers: list[str],
                   trained: list[str], state: list[str]):
    """The step as a function of tensors (batch, parameters, buffers, state) -> (loss, new trained parameters,
    new state), for make_fx. The model runs through `torch.func.functional_call` with the given tensors, inside
    a module that calls `loss_fn(model, *batch)`, so the loss function may use the model as it likes."""

    class Loss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *batch):
            return loss_fn(self.model, *batch)

    wrapper = Loss()

    def step(*args):
        batch = args[:num_batch]
        values = dict(zip(params + buffers + state, args[num_batch:]))
        fixed = {f"model.{n}": values[n] for n in params + buffers if n not in trained}

        def loss_of(weights: dict):
            loss = torch.func.functional_call(wrapper, {**fixed, **{f"model.{n}": w for n, w in weights.items()}},
                                              batch)
            if not isinstance(loss, torch.Tensor) or loss.dim() != 0 or not loss.is_floating_point():
                got = (f"a {type(loss).__name__}" if not isinstance(loss, torch.Tensor)
                       else f"a {loss.dtype} tensor of shape {list(loss.shape)}")
                raise FrontendError(f"training_step: loss_fn must return the loss as a scalar floating tensor, "
                                    f"got {got}; reduce it (e.g. .mean())")
            return loss

        grads, loss = torch.func.grad_and_value(loss_of)({n: values[n] for n in trained})
        new_params, new_state = optimizer.update({n: values[n] for n in trained}, grads,
                                                 {n: values[n] for n in state})
        return (loss, *(new_params[n] for n in trained), *(new_state[n] for n in state))

    return step


__all__ = ["LOSS", "training_step"]
