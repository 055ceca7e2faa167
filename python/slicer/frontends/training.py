"""A PyTorch training step as one Slicer program: `slicer.training_step(model, loss_fn, *batch, optimizer=...)`.

    step = slicer.training_step(model, lambda m, x, y: F.mse_loss(m(x), y), x, y, optimizer=slicer.SGD(lr=0.1))
    prog = slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=[slicer.Tile(arg="x", dim=0, axes="x")])
    loss, *new = prog.run(x, y)      # one step: the batch only, parameters and optimizer state are bound

The program computes the loss, its gradients (autograd's backward) and the optimizer's update (`optimizers.py`)
in one function, traced into aten ops with make_fx and imported by torch-mlir's fx importer (`torch_import.py`).
Its arguments are each named (`slicer.name`) and have a role (`ImportedProgram.arg_roles`); the list:
docs/module-notes.md, `frontends/training.py`.
"""

from __future__ import annotations

import contextlib
import inspect

from slicer.core.errors import FrontendError

from .accumulation import accumulated_gradients, check_microbatches, fence_count
from .clipping import LossGuard, optimizer_clip
from .module_paths import module_paths
from .optimizers import SGD, AdamW
from .precision import MixedPrecision, check_precision
from .program import ImportedProgram
from .randomness import RNG, random_stream
from .stacked_experts import ExpertStack, batched_experts, find_stacks, fold_stacks, member_values, stacked_parameters
from .stages import StepOrigin
from .stateful import cumulative_averages, prune_outputs
from .torch_import import (
    ENTRY,
    finish,
    first_line,
    import_graph,
    load_torch,
    raise_if_data_dependent,
    record_lines_of,
    trace,
)

LOSS = "loss"


def training_step(model, loss_fn, *example_batch, optimizer, seed: int = 0, microbatches: int = 1,
                  precision: MixedPrecision | None = None, cleanup: bool = True,
                  stacked: str | None = None) -> ImportedProgram:
    """Import one training step of `model` (a torch.nn.Module): the loss `loss_fn(model, *batch)` (a scalar
    tensor), its gradients with respect to the parameters and the update `optimizer` (`slicer.SGD` or
    `slicer.AdamW`) makes, traced on `example_batch` (tensors; their shapes are the program's). `seed` (an
    integer in [0, 2^63)) keys dropout's masks. `microbatches` (k >= 1, dividing dim 0 of every batch tensor):
    the step accumulates the gradients of k micro-batches, forward and backward one after the other, before its
    one update, so it holds one micro-batch's activations at a time (`accumulation.py`). `precision`
    (`slicer.MixedPrecision`): compute in its `param_dtype` on copies of the f32 parameters, sum gradients in its
    `reduce_dtype`, update in f32 (`precision.py`). See the module
    docstring for the arguments and results. `stacked` (a pattern, e.g. "blocks.*.moe.experts"): the experts of
    the nn.ModuleLists it names are imported as stacked weights `<path>.<weight>` [E, ...], their loop as one
    batched computation (`stacked_experts.py`). Raises FrontendError for a bad model, loss function, batch,
    optimizer, seed or microbatches, and when the step cannot be traced or imported."""
    torch, fx = load_torch()
    _check(torch, model, loss_fn, example_batch, optimizer)
    _check_seed(seed)
    check_microbatches(microbatches, example_batch)
    check_precision(precision)
    stacks = find_stacks(torch, model, stacked)
    params = stacked_parameters(torch, dict(model.named_parameters()), stacks)
    buffers = {n: b for n, b in model.named_buffers() if n not in params}
    trained = [n for n, p in params.items() if p.requires_grad]
    if not trained:
        raise FrontendError(f"{_what(model)} has no parameter that requires grad: nothing to train")
    state = {n: torch.zeros_like(params[p].detach()) for p in trained for n in optimizer.state_names(p)}
    state.update({n: torch.zeros((), dtype=torch.float32) for n in optimizer.shared_state()})
    own: dict[str, str] = {}  # trained parameter -> the state holding its compute copy (precision.py)
    if precision is not None:
        own = precision.copy_names(torch, params, trained)
        state.update(precision.copies_of(torch, {n: p.detach() for n, p in params.items()}, own))
    hyper = {n: torch.tensor(v, dtype=torch.float64)
             for n, v in optimizer.hyperparameter_values(0, at_import=True).items()}
    names = [*params, *buffers, *state, *hyper]
    batch_names = _batch_names(loss_fn, len(example_batch), set(names) | {LOSS, RNG})
    clash = sorted((set(params) | set(buffers)) & (set(state) | set(hyper) | {LOSS, RNG}))
    if clash:
        raise FrontendError(f"{_what(model)} has parameters or buffers named like the optimizer's state, its "
                            f"hyperparameters, the loss or the random state ({', '.join(clash)}), which name the "
                            "step's arguments and results; rename them")
    step = _step_function(torch, model, loss_fn, optimizer, len(example_batch), list(params), list(buffers),
                          trained, list(state), list(hyper), microbatches, precision, own, stacks)
    values = [t.detach() for t in (*params.values(), *buffers.values())] + [*state.values(), *hyper.values()]
    rng = torch.tensor([seed, 0], dtype=torch.int64)
    casts = (precision.cast_count(torch, [t for n, t in params.items() if n not in own])
             if precision is not None else 0)
    what = f"the training step of {_what(model)}"
    args = [*example_batch, *values, rng]
    record_lines_of(torch, loss_fn)
    try:
        with _attributes_kept(torch, model), cumulative_averages(torch, model), module_paths(torch, model), \
                batched_experts(torch, model, stacks, step.stacked):
            graph = fold_stacks(torch, trace(torch, step, args, what)) if stacks else trace(torch, step, args, what)
        # outputs: loss, trained parameters, buffers (copies), state, rng; the copies nobody wrote are dropped
        first = 1 + len(trained)
        copies = {first + i: len(example_batch) + len(params) + i for i in range(len(buffers))}
        kept, random = prune_outputs(torch, graph, copies, len(args) - 1)
        text = import_graph(fx, graph, what)
    except FrontendError:
        raise
    except Exception as exc:  # torch's tracing and torch-mlir raise many kinds; the first line says what failed
        raise_if_data_dependent(exc, what)  # .item() and the like: say at which line
        raise FrontendError(f"{what} could not be traced and imported: {first_line(exc)} (the loss function must "
                            "compute a scalar loss from the model's outputs with torch operations)") from exc
    written = tuple(list(buffers)[o - first] for o in kept)
    arg_names = (*batch_names, *names, *((RNG,) if random else ()))
    result_names = (LOSS, *trained, *(b for b in buffers if b in written), *state, *((RNG,) if random else ()))
    text = finish(text, what, arg_names, result_names, cleanup=cleanup, training=model.training,
                  fences=fence_count(microbatches, len(trained)) + casts)
    roles = (("input",) * len(batch_names) + ("parameter",) * len(params) + ("buffer",) * len(buffers)
             + ("state",) * len(state) + ("hyper",) * len(hyper) + ("state",) * random)
    bound = (*values, rng) if random else tuple(values)
    return ImportedProgram(text, arg_names, len(batch_names), bound, ENTRY, what,
                           result_names=result_names, arg_roles=roles,
                           hyperparameters=optimizer.hyperparameter_values,
                           origin=StepOrigin(model, loss_fn, tuple(example_batch), tuple(batch_names), optimizer,
                                             microbatches, precision, seed))


@contextlib.contextmanager
def _attributes_kept(torch, model):
    """Leave `model`'s plain tensor attributes as they were before tracing: a forward that stores a tensor on its
    module (an MoE layer's `self.aux_loss`) would otherwise leave a traced tensor there, which no later call can
    use (`copy.deepcopy(model)` refuses it; a torch forward overwrites it anyway)."""
    kept = [(module, dict(module.__dict__)) for module in model.modules()]
    try:
        yield
    finally:
        for module, before in kept:
            for key, value in list(module.__dict__.items()):
                if isinstance(value, torch.Tensor) and before.get(key) is not value:
                    if key in before:
                        module.__dict__[key] = before[key]
                    else:
                        del module.__dict__[key]


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
                   trained: list[str], state: list[str], hyper: list[str], microbatches: int,
                   precision: MixedPrecision | None = None, copies: dict[str, str] | None = None,
                   stacks: list[ExpertStack] | None = None):
    """The step as a function of tensors (batch, parameters, buffers, state, hyperparameters, rng) -> (loss, new
    trained parameters, every buffer's new value, new state[, new rng], the accumulation's fences), for
    make_fx. The model runs through
    `torch.func.functional_call` with the given tensors, inside a module that calls `loss_fn(model, *batch)`
    under the `LossGuard`, so the loss function may use the model as it likes; the clipping it asks for applies
    to the gradients. Its buffers are copies, which a module in training mode may write (batch norm); dropout
    draws from `rng` (`randomness.random_stream`), which comes back advanced when it did. The gradients are
    autograd's (`torch.autograd.grad`), not functorch's: inside `torch.func.grad` a module may not write a tensor
    from outside the transform, and the buffers are. With `microbatches` > 1 they are accumulated over the
    micro-batches (`accumulation.py`). Under a `precision` policy the model computes on its copies of the
    parameters and inputs: a trained parameter's is the state `copies[name]`, written by the update
    (`MixedPrecision.copies_of`), the others are cast (`compute_copies`, `input_cast`; those casts are fences
    too); the loss comes back in f32. The model sees the members of `stacks`' stacked weights
    (`stacked_experts.py`), which `step.stacked` holds while it runs, for the batched experts."""
    copies, stacks = copies or {}, stacks or []
    live: dict = {}
    guard = LossGuard(torch, dict(model.named_parameters()))

    class Loss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *batch):
            with guard:
                return loss_fn(self.model, *batch)

    wrapper = Loss()

    def step(*args):
        batch, rng = args[:num_batch], args[-1]
        values = dict(zip(params + buffers + state + hyper, args[num_batch:-1]))
        # what the gradients are taken of: a trained parameter, or its compute copy (state) under a policy
        weights = {n: values[copies.get(n, n)].detach().requires_grad_() for n in trained}
        guard.weights = weights
        written = {n: values[n].clone() for n in buffers}
        parameters = {**{n: values[n] for n in params}, **weights}
        # under a precision policy the parameters' compute copies (not the buffers: a batch norm writes its
        # running statistics into its f32 buffers, as under FSDP2)
        computed = precision.compute_copies(torch, parameters) if precision is not None else parameters
        casts = [t for n, t in computed.items() if t is not parameters[n]]
        live.clear()
        live.update(computed)
        named = {f"model.{n}": t for n, t in {**member_values(computed, stacks), **written}.items()}

        def loss_of(*micro_batch):
            loss = _checked_loss(torch, torch.func.functional_call(wrapper, named, micro_batch))
            return loss if precision is None else loss.to(torch.float32)

        with random_stream(rng) as stream, _casts_around(model, precision, torch):
            loss, grads, fences = accumulated_gradients(torch, loss_of, batch, list(weights.values()),
                                                        microbatches, stream, guard,
                                                        [values[n].dtype for n in trained])
        grads = dict(zip(trained, grads))
        for clip in guard.clips + optimizer_clip(optimizer):
            grads = clip.apply(torch, grads)
        new_params, new_state = optimizer.update({n: values[n] for n in trained}, grads,
                                                 {n: values[n] for n in state}, {n: values[n] for n in hyper})
        if copies:
            new_state.update(precision.copies_of(torch, new_params, copies))
        advanced = (stream.advanced(torch),) if stream.drawn else ()
        return (loss, *(new_params[n] for n in trained), *(written[n] for n in buffers),
                *(new_state[n] for n in state), *advanced, *fences, *casts)

    step.stacked = live  # type: ignore[attr-defined]
    return step


@contextlib.contextmanager
def _casts_around(model, precision: MixedPrecision | None, torch):
    """While the step is traced, `model`'s floating inputs and outputs are cast as `precision` asks (if it does)."""
    handles = []
    if precision is not None:
        if (before := precision.input_cast(torch)) is not None:
            handles.append(model.register_forward_pre_hook(before))
        if (after := precision.output_cast(torch)) is not None:
            handles.append(model.register_forward_hook(after))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _checked_loss(torch, loss):
    """`loss`, if it is a scalar floating tensor; else a FrontendError saying how to reduce it."""
    if not isinstance(loss, torch.Tensor) or loss.dim() != 0 or not loss.is_floating_point():
        got = (f"a {type(loss).__name__}" if not isinstance(loss, torch.Tensor)
               else f"a {loss.dtype} tensor of shape {list(loss.shape)}")
        raise FrontendError(f"training_step: loss_fn must return the loss as a scalar floating tensor, "
                            f"got {got}; reduce it (e.g. .mean())")
    return loss


def _check_seed(seed) -> None:
    """FrontendError unless `seed` is an integer in [0, 2^63) (the first word of the int64 random state)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2 ** 63:
        raise FrontendError(f"training_step: seed must be an integer in [0, 2^63), got {seed!r} (it keys the "
                            "dropout masks the step computes, slicer.dropout_mask)")


__all__ = ["LOSS", "training_step"]
