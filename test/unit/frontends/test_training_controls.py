"""The controls of a training step: hyperparameters as runtime scalars ("hyper" arguments) set per step or by a
schedule (slicer.schedules, equal to torch.optim.lr_scheduler's), gradient clipping by global norm and by value
(the optimizer's option, or torch.nn.utils.clip_grad_norm_ in the loss function: the same program), compared with
torch eager (torch.optim foreach=False, LambdaLR, clip_grad_norm_) on the simulator; what the loss function asks
that Slicer would not honour, and bad settings, are clear errors. (2 MPI ranks: test/mpi/test_training_controls.py.)"""

import copy
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import slicer  # noqa: E402
from example_modules import load  # noqa: E402
from slicer import schedules  # noqa: E402

train = load("torch/train_step.py", "train_step")
lr_scheduler = torch.optim.lr_scheduler
STEPS = 20


def warmup_cosine(t: int) -> float:
    """The factor LambdaLR multiplies the base rate by: 5 steps of linear warmup from 0, cosine to 0 at 20."""
    return t / 5 if t < 5 else 0.5 * (1 + math.cos(math.pi * (t - 5) / 15))


def torch_lrs(make_scheduler, steps: int = 30, lr: float = 0.1) -> list[float]:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    scheduler, lrs = make_scheduler(opt), []
    for _ in range(steps):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        scheduler.step()
    return lrs


@pytest.mark.parametrize("ours, theirs, steps", [
    (schedules.constant(0.1), lambda o: lr_scheduler.LambdaLR(o, lambda t: 1.0), 30),
    (schedules.linear_warmup(0.1, 10, start_factor=0.1), lambda o: lr_scheduler.LinearLR(o, 0.1, 1.0, 10), 30),
    (schedules.cosine(0.1, 30, min_lr=0.01), lambda o: lr_scheduler.CosineAnnealingLR(o, 30, eta_min=0.01), 31),
    (schedules.cosine(0.1, 30, warmup_steps=8, min_lr=0.01, start_factor=0.25), lambda o: lr_scheduler.SequentialLR(
        o, [lr_scheduler.LinearLR(o, 0.25, 1.0, 8), lr_scheduler.CosineAnnealingLR(o, 22, eta_min=0.01)], [8]), 31),
    (schedules.cosine(0.1, 20, warmup_steps=5), lambda o: lr_scheduler.LambdaLR(o, warmup_cosine), 20),
    (schedules.step_decay(0.1, 7, gamma=0.5), lambda o: lr_scheduler.StepLR(o, 7, gamma=0.5), 30),
])
def test_schedules_equal_torch_schedulers(ours, theirs, steps):
    np.testing.assert_allclose([ours(t) for t in range(steps)], torch_lrs(theirs, steps), rtol=1e-12, atol=1e-15)


def torch_run(model, loss_fn, batch, optimizer, *, base_lr=None, steps=STEPS, lrs=None, factor=None, max_norm=None,
              clip_value=None):
    """(losses, parameters, gradient norms before clipping) of `steps` torch eager steps: torch.optim with the
    optimizer's settings (foreach=False; `base_lr` for a scheduled rate) with LambdaLR(`factor`) or the rates
    `lrs` set per step, clipped by clip_grad_norm_ / clip_grad_value_ between backward and step."""
    model = copy.deepcopy(model)
    params, lr = [p for p in model.parameters() if p.requires_grad], base_lr or optimizer.lr
    if isinstance(optimizer, slicer.SGD):
        opt = torch.optim.SGD(params, lr, momentum=optimizer.momentum, weight_decay=optimizer.weight_decay,
                              foreach=False)
    else:
        opt = torch.optim.AdamW(params, lr, betas=optimizer.betas, eps=optimizer.eps,
                                weight_decay=optimizer.weight_decay, foreach=False)
    scheduler = lr_scheduler.LambdaLR(opt, factor) if factor is not None else None
    losses, norms = [], []
    for t in range(steps):
        if lrs is not None:
            opt.param_groups[0]["lr"] = lrs[t]
        opt.zero_grad()
        loss = loss_fn(model, *batch)
        loss.backward()
        if max_norm is not None:
            norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm, foreach=False)))
        if clip_value is not None:
            torch.nn.utils.clip_grad_value_(model.parameters(), clip_value, foreach=False)
        opt.step()
        if scheduler is not None:
            scheduler.step()
        losses.append(loss.item())
    return losses, {n: p.detach().numpy().copy() for n, p in model.named_parameters()}, norms


def errors(got_losses, got_state, want_losses, want_params):
    loss_error = max(train.relative_error(g, w) for g, w in zip(got_losses, want_losses))
    return loss_error, max(train.relative_error(got_state[n], w) for n, w in want_params.items())


def compiled(step):
    return slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=slicer.strategies.data_parallel(step, "x"))


@pytest.mark.slow
def test_adamw_with_a_warmup_cosine_schedule_and_clipping_equals_torch():
    """20 steps, the learning rate from a schedule (0 on the first step), the gradients clipped to a global norm
    below theirs on the first steps; the hyperparameters are float64 scalar arguments, replicated."""
    model, loss_fn, batch = train.mlp()
    optimizer = slicer.AdamW(schedules.cosine(0.01, STEPS, warmup_steps=5), betas=(0.8, 0.99), weight_decay=0.1,
                             clip_grad_norm=0.5)
    step = slicer.training_step(model, loss_fn, *batch, optimizer=optimizer)
    assert step.names_with_role("hyper") == ("lr", "weight_decay", "beta1", "beta2")
    assert [float(v) for v in step.parameters[-4:]] == [0.0, 0.1, 0.8, 0.99]  # step 0's values
    assert "tensor<f64> {slicer.name = \"lr\"}" in step.text
    prog = compiled(step)
    assert "(lr): [] as [] (local [])" in prog.explain().replace("f64", "")
    want_losses, want_params, norms = torch_run(model, loss_fn, batch, optimizer, base_lr=0.01,
                                                factor=warmup_cosine, max_norm=0.5)
    assert min(norms) < 0.5 < max(norms)  # clipped on the first steps, not on the last (the clamp to 1)
    got_losses, got_state = train.slicer_steps(prog, batch, STEPS)
    loss_error, param_error = errors(got_losses, got_state, want_losses, want_params)
    assert loss_error <= 1e-5 and param_error <= 1e-5
    # Program.run is one step with step 0's values (lr 0: only the weight decay's factor 1 - 0 * 0.1)
    loss, *new = prog.run(*batch)
    assert np.array_equal(new[0], model[0].weight.detach().numpy())


@pytest.mark.slow
def test_learning_rate_per_step_and_clipping_in_the_loss_function():
    """SGD with momentum: the rate given to every session.step, clipping asked by the loss function calling
    torch.nn.utils.clip_grad_norm_ (the same program as the optimizer's clip_grad_norm=), and clip_grad_value_."""
    model, loss_fn, batch = train.mlp()

    def clipped_loss(model, x, y):
        loss = loss_fn(model, x, y)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        return loss

    optimizer = slicer.SGD(0.1, momentum=0.9, weight_decay=0.01)
    by_loss = slicer.training_step(model, clipped_loss, *batch, optimizer=optimizer)
    by_option = slicer.training_step(
        model, loss_fn, *batch, optimizer=slicer.SGD(0.1, momentum=0.9, weight_decay=0.01, clip_grad_norm=0.5)
    )
    assert by_loss.text == by_option.text
    assert by_loss.names_with_role("hyper") == ("lr", "weight_decay", "momentum")
    lrs = [0.2 / (1 + t) for t in range(STEPS)]
    want_losses, want_params, norms = torch_run(model, loss_fn, batch, optimizer, lrs=lrs, max_norm=0.5)
    assert max(norms) > 0.5
    with compiled(by_loss).session() as session:
        got_losses = [float(session.step(*batch, lr=lrs[t])) for t in range(STEPS)]
        loss_error, param_error = errors(got_losses, session.state_dict(), want_losses, want_params)
    assert loss_error <= 1e-5 and param_error <= 1e-5


@pytest.mark.slow
def test_clip_grad_value_in_the_loss_function_equals_torch():
    model, loss_fn, batch = train.mlp()

    def clipped_loss(model, x, y):
        loss = loss_fn(model, x, y)
        torch.nn.utils.clip_grad_value_(model.parameters(), 0.05)
        return loss

    optimizer = slicer.SGD(0.1)
    step = slicer.training_step(model, clipped_loss, *batch, optimizer=optimizer)
    want_losses, want_params, _ = torch_run(model, loss_fn, batch, optimizer, steps=5, clip_value=0.05)
    got_losses, got_state = train.slicer_steps(compiled(step), batch, 5)
    loss_error, param_error = errors(got_losses, got_state, want_losses, want_params)
    assert loss_error <= 1e-5 and param_error <= 1e-5


@pytest.mark.slow
def test_bad_hyperparameters_at_a_step_are_clear_errors():
    model, loss_fn, batch = train.mlp()

    def schedule(t):
        return 0.1 if t < 2 else float("nan") if t == 2 else "fast"

    step = slicer.training_step(model, loss_fn, *batch, optimizer=slicer.SGD(schedule))
    with compiled(step).session() as session:
        with pytest.raises(slicer.InputError, match=r"SGD has no hyperparameter 'learning_rate': a step takes lr, "
                                                    r"weight_decay \(e.g. session.step\(\*batch, lr=1e-3\)\)"):
            session.step(*batch, learning_rate=0.1)
        with pytest.raises(slicer.InputError, match=r"SGD: lr \(given to the step\) must be >= 0, got -1"):
            session.step(*batch, lr=-1)
        session.step(*batch)
        session.step(*batch)
        with pytest.raises(slicer.InputError, match=r"lr \(its schedule .* at step 2\) must be a finite number "
                                                    r">= 0, got nan"):
            session.step(*batch)
        assert session.steps == 2
        session.step(*batch, lr=0.1)
        with pytest.raises(slicer.InputError, match=r"at step 3\) must be a finite number >= 0, got 'fast'"):
            session.step(*batch)
    with pytest.raises(slicer.RunError, match=r"state names 'lr', which is a hyperparameter: pass it to "
                                              r"session.step"):
        compiled(step).session(state={"lr": np.float64(0.1)})
    with pytest.raises(slicer.FrontendError, match=r"lr \(its schedule .* at step 0\) must be a finite number"):
        slicer.training_step(model, loss_fn, *batch, optimizer=slicer.SGD(lambda t: None))


@pytest.mark.parametrize("make, message", [
    (lambda: slicer.SGD(0.1, clip_grad_norm=0), r"SGD: clip_grad_norm must be > 0, got 0 \(the largest global "
                                                r"norm of the gradients, e.g. clip_grad_norm=1.0; None: no clipping\)"),
    (lambda: slicer.AdamW(1e-3, clip_grad_norm=-1.0), r"AdamW: clip_grad_norm must be > 0, got -1.0"),
    (lambda: slicer.AdamW(1e-3, clip_grad_norm=float("inf")), r"AdamW: clip_grad_norm must be a finite number"),
    (lambda: schedules.cosine(0.1, 10, warmup_steps=10), r"warmup_steps \(10\) must be less than total_steps"),
    (lambda: schedules.step_decay(0.1, 0), r"step_decay: step_size must be an integer > 0, got 0"),
    (lambda: schedules.linear_warmup(0.1, 5, start_factor=2), r"start_factor must be a finite number >= 0 and "
                                                                 r"<= 1, got 2"),
])
def test_bad_settings_are_clear_errors(make, message):
    with pytest.raises(slicer.FrontendError, match=message):
        make()


MSE = train.mlp()[1]
"""The MLP's loss function, made once: the helpers below call it inside the traced loss function, where building a
model (torch's random initialisation) would be refused as a random draw."""


def _grad_write(model, x, y):
    loss = MSE(model, x, y)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    return loss


def _grad_scale(model, x, y):
    loss = MSE(model, x, y)
    model[0].weight.grad.mul_(0.5)
    return loss


def _backward(model, x, y):
    loss = MSE(model, x, y)
    loss.backward()
    return loss


def _optimizer_step(model, x, y):
    loss = MSE(model, x, y)
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    return loss


def _total_norm(model, x, y):
    torch.nn.utils.get_total_norm([p for p in model.parameters()])
    return MSE(model, x, y)


def _one_norm(model, x, y):
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, norm_type=1)
    return MSE(model, x, y)


def _foreign(model, x, y):
    torch.nn.utils.clip_grad_norm_([torch.ones(2)], 1.0)
    return MSE(model, x, y)


@pytest.mark.parametrize("loss_fn, message", [
    (_grad_write, r"the loss function writes the .grad of parameter '0.weight', which does not exist while the "
                  r"loss is computed.*call torch.nn.utils.clip_grad_norm_"),
    (_grad_scale, r"the loss function reads the .grad of parameter '0.weight'"),
    (_backward, r"calls Tensor.backward\(\), which Slicer does not honour there: return the loss"),
    (_optimizer_step, r"calls a torch.optim optimizer's step\(\).*give the optimizer's settings to slicer.SGD"),
    (_total_norm, r"calls get_total_norm of torch.nn.utils, which Slicer does not honour"),
    (_one_norm, r"clip_grad_norm_ in the loss function: Slicer clips by the 2-norm only"),
    (_foreign, r"clip_grad_norm_ in the loss function: got a tensor that is not a parameter of the model"),
])
def test_what_the_step_would_not_honour_is_refused(loss_fn, message):
    model, _, batch = train.mlp()
    with pytest.raises(slicer.FrontendError, match=message):
        slicer.training_step(model, loss_fn, *batch, optimizer=slicer.SGD(0.1))
    # the guard is gone after the trace: torch's own attributes are back
    assert "grad" not in torch.Tensor.__dict__ and model[0].weight.grad is None
    assert torch.nn.utils.clip_grad_norm_.__module__ == "torch.nn.utils.clip_grad"


@pytest.mark.slow
def test_a_plain_program_takes_no_hyperparameters():
    model, loss_fn, batch = train.mlp()
    imported = slicer.from_torch(model.eval(), batch[0])
    with slicer.compile(imported, mesh=slicer.Mesh(x=2)).session() as session:
        with pytest.raises(slicer.InputError, match=r"this program has no hyperparameters .*not lr="):
            session.step(batch[0], lr=0.1)
