"""PyTorch models and tensor functions as Slicer programs: `slicer.from_torch(model, *example_inputs)`.

    import slicer, torch
    block = GPT2Block().eval()
    imported = slicer.from_torch(block, torch.randn(4, 64, 256))
    prog = slicer.compile(imported, mesh=slicer.Mesh(y=4), tactics=[
        slicer.Tile(arg="attn.proj.weight", dim=1, axes="y"),    # heads
        slicer.Tile(arg="mlp.fc1.weight", dim=0, axes="y"),      # hidden units
        slicer.Tile(arg="mlp.fc1.bias", dim=0, axes="y"),
        slicer.Tile(arg="mlp.fc2.weight", dim=1, axes="y")])
    out = prog.run(x, ranks=4)                                   # the inputs only: parameters are bound

Details: docs/module-notes.md, `frontends/pytorch.py`.
"""

from __future__ import annotations

import inspect
import re

from slicer.core.errors import FrontendError

from .program import ImportedProgram
from .torch_import import ENTRY, export, finish, first_line, import_graph, load_torch, raise_if_data_dependent, trace

#: What an error of torch.export or make_fx says when gradients are what it could not trace.
GRADIENTS = re.compile(r"grad|TensorWrapper|functorch", re.IGNORECASE)


def _input_names(function, count: int) -> list[str]:
    try:
        params = [p for p in inspect.signature(function).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params[:count]]
    return names + [f"input{i}" for i in range(len(names), count)]


def _stateless(torch, model, names: list[str], num_inputs: int, kwargs: dict, complex_names=frozenset()):
    """An nn.Module whose forward takes the inputs, then the values of `names` (parameters and buffers of
    `model`, which it holds without registering them), and calls `model` with those values. Those named in
    `complex_names` arrive as their real view (`_real_view`) and are made complex again first."""

    class Stateless(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.__dict__["model"] = model  # not a submodule: its tensors must not become this module's

        def forward(self, *args):
            values = dict(zip(names, args[num_inputs:]))
            values.update({n: torch.view_as_complex(values[n]) for n in complex_names})
            return torch.func.functional_call(self.__dict__["model"], values, tuple(args[:num_inputs]), kwargs)

    return Stateless()


def _real_view(torch, value):
    """A complex tensor as the real tensor Slicer can hold (`torch.view_as_real`: a trailing dim of 2, real and
    imaginary parts; complex RoPE's `freqs_cis` buffer): kernels and collectives hold real and integer
    elements only. Other tensors as they are."""
    return torch.view_as_real(value.resolve_conj().contiguous()) if value.is_complex() else value


def _function(torch, function, kwargs: dict):
    class Function(torch.nn.Module):
        def forward(self, *args):
            return function(*args, **kwargs)

    return Function()


def from_torch(model, *example_inputs, cleanup: bool = True, **kwargs) -> ImportedProgram:
    """Import `model` (a `torch.nn.Module`, or a function of tensors) as traced on `example_inputs`.

    The program's arguments are the inputs, then the module's parameters and buffers, all named; `kwargs` are
    passed to the model on every call and fixed at import (e.g. `is_causal=True`). `cleanup=False` keeps
    torch-mlir's linalg as it is (for inspection). Raises FrontendError (torch missing, inputs that are not
    tensors, a model torch.export or torch-mlir cannot import)."""
    torch, fx = load_torch()
    inputs = []
    for index, value in enumerate(example_inputs):
        if not isinstance(value, torch.Tensor):
            try:
                value = torch.as_tensor(value)
            except (TypeError, ValueError, RuntimeError):
                raise FrontendError(f"example input #{index} is a {type(value).__name__}, not a tensor; pass tensors "
                                    "(or numpy arrays) positionally, and fixed options as keyword arguments") from None
        inputs.append(value)
    if isinstance(model, torch.nn.Module):
        _check_inference(torch, model)
        named = dict(model.named_parameters())
        roles = ["parameter"] * len(named)
        buffers = {n: b for n, b in model.named_buffers() if n not in named}
        named.update(buffers)
        roles += ["buffer"] * len(buffers)
        names, values = list(named), [v.detach() for v in named.values()]
        complex_names = frozenset(n for n, v in zip(names, values) if v.is_complex())
        values = [_real_view(torch, v) for v in values]
        wrapper = _stateless(torch, model, names, len(inputs), kwargs, complex_names)
        what = f"the {type(model).__module__}.{type(model).__qualname__} module"
        input_names = _input_names(model.forward, len(inputs))
    elif callable(model):
        names, values, roles = [], [], []
        wrapper = _function(torch, model, kwargs)
        what = f"the function {getattr(model, '__qualname__', repr(model))}"
        input_names = _input_names(model, len(inputs))
    else:
        raise FrontendError(f"from_torch imports a torch.nn.Module or a function of tensors, not a "
                            f"{type(model).__name__}")
    input_names = [n if n not in names else f"input.{n}" for n in input_names]
    text = _import(torch, fx, wrapper, [*inputs, *values], what)
    arg_names = tuple(input_names + names)
    text = finish(text, what, arg_names, cleanup=cleanup, training=getattr(model, "training", False))
    return ImportedProgram(text, arg_names, len(inputs), tuple(values), ENTRY, what,
                           arg_roles=("input",) * len(inputs) + tuple(roles))


def _check_inference(torch, model) -> None:
    """FrontendError naming the first normalization layer of `model` that is in training mode with running
    statistics (BatchNorm, InstanceNorm with track_running_stats): its forward updates them, which a program of
    its inputs would return as extra, unnamed results. `from_torch` imports inference."""
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.modules.batchnorm._NormBase) and module.training \
                and module.track_running_stats:
            raise FrontendError(f"from_torch imports a model for inference, but {type(module).__name__} "
                                f"'{name or type(model).__name__}' is in training mode and updates its running "
                                "statistics; call model.eval() first, or train it with slicer.training_step (which "
                                "returns the statistics as results of the step)")


def _import(torch, fx, module, args, what: str) -> str:
    """torch-mlir's linalg for `module(*args)`: through torch.export (under no_grad), and where that fails,
    through make_fx (with gradients enabled: a function that computes gradients traces this way). FrontendError
    quoting both failures when neither works, and pointing at `slicer.training_step` when gradients are why."""
    try:
        return export(torch, fx, module, args, what)
    except FrontendError:
        raise
    except Exception as exported:  # noqa: BLE001 - torch.export and torch-mlir raise many kinds
        # (the first line says what failed)
        try:
            return import_graph(fx, trace(torch, module, args), what)
        except FrontendError:
            raise
        except Exception as traced:
            raise_if_data_dependent(traced, what)
            if GRADIENTS.search(f"{exported}\n{traced}"):
                raise FrontendError(
                    f"torch-mlir could not import {what}: it computes gradients, which torch.export cannot trace "
                    f"({first_line(exported)}) and make_fx could not either ({first_line(traced)}); for a "
                    "training step use slicer.training_step(model, loss_fn, *batch, optimizer=slicer.SGD(...)), "
                    "which traces the forward, the backward and the update itself") from traced
            raise FrontendError(f"torch-mlir could not import {what}: {first_line(exported)}") from exported


__all__ = ["ENTRY", "from_torch"]
