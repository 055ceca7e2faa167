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

How: the model runs through `torch.func.functional_call` with its parameters and buffers passed as arguments,
so `torch.export` (via `torch_mlir.fx.export_and_import(..., output_type="linalg-on-tensors")`) makes them
function arguments instead of constants; the arguments are named (`slicer.name`): the model's inputs by the
names of `forward`'s parameters, then every parameter and buffer by its dotted name (`model.named_parameters()`,
then `named_buffers()`). The import-time cleanup (`slicer.frontends.cleanup`) then makes the program
partitionable. Shapes are those of the example inputs (static); keyword arguments are fixed at import.

torch and torch-mlir are an optional extra (`pip install 'slicer[torch]'`), imported when first used.
"""

from __future__ import annotations

import inspect
import os
import re
import sys
import warnings

from mlir import ir

from slicer.core.errors import FrontendError
from slicer.core.functions import entry_function
from slicer.core.names import ARG_ATTRS_ATTR, ARG_NAME_ATTR, FUNCTION_TYPE_ATTR
from slicer.dialect import make_context, walk_ops

from .cleanup import clean_up
from .program import ImportedProgram

ENTRY = "forward"
INSTALL = "pip install 'slicer[torch]' (torch==2.13.0, torch-mlir==20261001)"


def _torch():
    """torch and torch-mlir's fx importer (optional dependencies, imported on first use).

    torch-mlir carries its own LLVM (24), linked into its libraries with visible symbols. Once Slicer's JIT has
    run in the process, MLIR's LLVM (22) is loaded globally (the ExecutionEngine loads the runner utilities
    RTLD_GLOBAL), and torch-mlir's LLVM would register its command-line options into MLIR's registry: "Option
    'print-inst-addrs' registered more than once!", and the process aborts. Loaded with RTLD_DEEPBIND, torch-mlir's
    libraries bind to their own LLVM first, so the two coexist in either order."""
    try:
        import torch  # optional dependency: only the torch frontend needs it
    except ImportError as exc:
        raise FrontendError(f"importing a PyTorch model needs torch and torch-mlir ({exc.name} is missing): "
                            f"{INSTALL}") from None
    flags = sys.getdlopenflags()
    if hasattr(os, "RTLD_DEEPBIND"):
        sys.setdlopenflags(flags | os.RTLD_DEEPBIND)
    try:
        from torch_mlir import fx  # optional dependency, loads torch-mlir's LLVM (see above)
    except ImportError as exc:
        raise FrontendError(f"importing a PyTorch model needs torch and torch-mlir ({exc.name} is missing): "
                            f"{INSTALL}") from None
    finally:
        sys.setdlopenflags(flags)
    return torch, fx


def _input_names(function, count: int) -> list[str]:
    try:
        params = [p for p in inspect.signature(function).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params[:count]]
    return names + [f"input{i}" for i in range(len(names), count)]


def _stateless(torch, model, names: list[str], num_inputs: int, kwargs: dict):
    """An nn.Module whose forward takes the inputs, then the values of `names` (parameters and buffers of
    `model`, which it holds without registering them), and calls `model` with those values."""

    class Stateless(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.__dict__["model"] = model  # not a submodule: its tensors must not become this module's

        def forward(self, *args):
            values = dict(zip(names, args[num_inputs:]))
            return torch.func.functional_call(self.__dict__["model"], values, tuple(args[:num_inputs]), kwargs)

    return Stateless()


def _function(torch, function, kwargs: dict):
    class Function(torch.nn.Module):
        def forward(self, *args):
            return function(*args, **kwargs)

    return Function()


def _decompositions(torch) -> dict:
    """torch-mlir's decompositions, and torch's own for `aten.gelu`: torch-mlir's lowering of the tanh
    approximation multiplies by 0.797724 where torch uses sqrt(2/pi) = 0.7978846 (a relative difference of
    2e-4, visible in a block's output), while torch's decomposition is the exact formula torch evaluates."""
    from torch._decomp import get_decompositions  # optional dependency, like torch itself
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table

    table = dict(get_decomposition_table())
    table.update(get_decompositions([torch.ops.aten.gelu]))
    return table


def from_torch(model, *example_inputs, cleanup: bool = True, **kwargs) -> ImportedProgram:
    """Import `model` (a `torch.nn.Module`, or a function of tensors) as traced on `example_inputs`.

    The program's arguments are the inputs, then the module's parameters and buffers, all named; `kwargs` are
    passed to the model on every call and fixed at import (e.g. `is_causal=True`). `cleanup=False` keeps
    torch-mlir's linalg as it is (for inspection). Raises FrontendError (torch missing, inputs that are not
    tensors, a model torch.export or torch-mlir cannot import)."""
    torch, fx = _torch()
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
        named = dict(model.named_parameters())
        roles = ["parameter"] * len(named)
        buffers = {n: b for n, b in model.named_buffers() if n not in named}
        named.update(buffers)
        roles += ["buffer"] * len(buffers)
        names, values = list(named), [v.detach() for v in named.values()]
        wrapper = _stateless(torch, model, names, len(inputs), kwargs)
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
    try:
        with torch.no_grad(), warnings.catch_warnings():
            # torch.export's own pytree code trips torch's deprecation of LeafSpec checks (torch 2.13): not ours
            warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)", category=FutureWarning)
            imported = fx.export_and_import(wrapper, *inputs, *values, output_type="linalg-on-tensors",
                                            func_name=ENTRY, decomposition_table=_decompositions(torch))
    except Exception as exc:  # torch.export and torch-mlir raise many kinds; the first line says what failed
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise FrontendError(f"torch-mlir could not import {what}: {type(exc).__name__}: {first}") from exc
    arg_names = tuple(input_names + names)
    with make_context():
        module = _parse(str(imported), what)
        stateful = next((op for op in walk_ops(module.operation) if op.name.startswith("ml_program.")), None)
        if stateful is not None:
            training = " (it is in training mode: call .eval() first)" if getattr(model, "training", False) else ""
            raise FrontendError(f"{what} keeps state between calls ('{stateful.name}', e.g. the random number "
                                f"generator of dropout){training}; Slicer partitions functions of their inputs")
        func = entry_function(module.operation, ENTRY)
        count = len(ir.FunctionType(ir.TypeAttr(func.attributes[FUNCTION_TYPE_ATTR]).value).inputs)
        if count != len(arg_names):
            raise FrontendError(f"torch-mlir gave @{ENTRY} {count} arguments for {len(inputs)} input(s) and "
                                f"{len(names)} parameter(s) and buffer(s) of {what}")
        if cleanup:
            clean_up(module.operation)
        func = entry_function(module.operation, ENTRY)
        func.attributes[ARG_ATTRS_ATTR] = ir.ArrayAttr.get(
            [ir.DictAttr.get({ARG_NAME_ATTR: ir.StringAttr.get(n)}) for n in arg_names])
        text = str(module)
    return ImportedProgram(text, arg_names, len(inputs), tuple(values), ENTRY, what,
                           arg_roles=("input",) * len(inputs) + tuple(roles))


def _parse(text: str, what: str) -> ir.Module:
    """torch-mlir's output in MLIR 22 (in a slicer context). Ops of torch-mlir's own dialects (`tm_tensor.scan`
    for cumsum, `tm_tensor.sort` for sort and topk, `tm_tensor.scatter` for index_put) have no upstream form
    this MLIR knows: a FrontendError names the op and what to do, instead of the parser's diagnostic."""
    try:
        return ir.Module.parse(text)
    except ir.MLIRError as exc:
        message = str(exc)
        unknown = re.search(r"Dialect `([\w.]+)' not found for custom op '([\w.]+)'", message)
        if unknown:
            dialect, op = unknown.groups()
            raise FrontendError(
                f"{what} uses '{op}', an op of torch-mlir's own '{dialect}' dialect (torch-mlir lowers cumsum, "
                "sort, topk, scatter and index_put that way) which MLIR's linalg cannot express and Slicer cannot "
                "compile; compute that part outside the imported model, or write it with ops that lower to linalg"
            ) from None
        lines = [line.strip() for line in message.splitlines() if line.strip()]
        raise FrontendError(f"the MLIR torch-mlir produced for {what} does not parse with this MLIR: "
                            f"{' '.join(lines[1:3]) or lines[0]}") from None


__all__ = ["ENTRY", "from_torch"]
