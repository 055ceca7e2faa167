"""slicer.training_step: a PyTorch training step (loss, backward, the optimizer's update) imported as one
program with named arguments and results, partitioned data-parallel and run step after step on the simulator,
equal to torch eager with torch.optim (foreach=False); from_torch on functions that compute gradients; every bad
input a FrontendError that says what to pass. (The same on 2 MPI ranks: test/mpi/test_training_step.py.)"""

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

from torch.nn import functional as F  # noqa: E402

import slicer  # noqa: E402
from example_modules import load  # noqa: E402

train = load("torch/train_step.py", "train_step")

SGD_CASES = {
    "sgd": slicer.SGD(0.1),
    "momentum": slicer.SGD(0.1, momentum=0.9),
    "weight_decay": slicer.SGD(0.05, momentum=0.5, weight_decay=0.1),
    "adamw": slicer.AdamW(0.01, betas=(0.8, 0.99), weight_decay=0.1),
}


def data_parallel(step, batch_arg: str):
    return slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=[slicer.Tile(arg=batch_arg, dim=0, axes="x")])


@pytest.mark.parametrize("case", list(SGD_CASES))
@pytest.mark.slow
def test_mlp_steps_equal_torch(case):
    model, loss_fn, batch = train.mlp()
    optimizer = SGD_CASES[case]
    step = slicer.training_step(model, loss_fn, *batch, optimizer=optimizer)
    loss_error, param_error = train.compare(model, loss_fn, batch, optimizer, data_parallel(step, "x"))
    assert loss_error <= 1e-5 and param_error <= 1e-5


@pytest.mark.parametrize("case", ["weight_decay", "adamw"])
@pytest.mark.slow
def test_gpt_steps_equal_torch(case):
    """A 2-block GPT, cross-entropy on the next tokens: the embeddings' and the loss's backward pass through
    the one-hot decompositions (frontends/decompositions.py), the batch of token ids over x. (Plain SGD only
    on the MLP: its update is SGD with momentum and weight decay with both 0, and each GPT case compiles a
    program's kernels anew, the bulk of these tests' time.)"""
    model, loss_fn, batch = train.gpt()
    if case == "adamw":
        train.freeze_attention_bias(model)  # see there: the keys' bias gradient is rounding noise
    optimizer = SGD_CASES[case]
    step = slicer.training_step(model, loss_fn, *batch, optimizer=optimizer)
    assert "tm_tensor" not in step.text and "math.fpowi" not in step.text
    loss_error, param_error = train.compare(model, loss_fn, batch, optimizer, data_parallel(step, "idx"))
    assert loss_error <= 1e-5 and param_error <= 1e-5


def test_arguments_results_and_bound_values_are_named():
    model, loss_fn, batch = train.mlp()
    model[2].bias.requires_grad_(False)  # frozen: an argument, neither trained nor returned
    step = slicer.training_step(model, loss_fn, *batch, optimizer=slicer.AdamW(1e-3))
    params = ("0.weight", "0.bias", "2.weight", "2.bias")
    state = ("exp_avg.0.weight", "exp_avg_sq.0.weight", "exp_avg.0.bias", "exp_avg_sq.0.bias",
             "exp_avg.2.weight", "exp_avg_sq.2.weight", "step")
    hyper = ("lr", "weight_decay", "beta1", "beta2")
    assert step.arg_names == ("x", "y", *params, *state, *hyper)
    assert step.arg_roles == ("input",) * 2 + ("parameter",) * 4 + ("state",) * 7 + ("hyper",) * 4
    assert step.names_with_role("state") == state
    assert step.result_names == ("loss", *params[:3], *state)
    assert step.num_inputs == 2 and step.parameter_names == (*params, *state, *hyper)
    values = dict(zip(step.parameter_names, step.parameters))
    assert values["0.weight"] is not model[0].weight and np.array_equal(values["0.weight"], model[0].weight.detach())
    assert not values["exp_avg.0.weight"].any() and values["step"].shape == () and float(values["step"]) == 0
    assert '-> (tensor<f32> {slicer.name = "loss"}, tensor<16x8xf32> {slicer.name = "0.weight"}' in step.text
    # results are found by name: the first moment of 0.weight tiled like the weight's rows
    prog = slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=[slicer.Tile(arg="0.weight", dim=0, axes="x"),
                                                                slicer.Tile(result="exp_avg.0.weight", dim=0,
                                                                            axes="x")])
    assert (
        "result #4 (exp_avg.0.weight): [16, 8] as [[x],[]] (tactic Tile(result='exp_avg.0.weight', dim=0, axes='x'))"
        in prog.explain()
    )


def test_sgd_without_momentum_keeps_no_state_and_buffers_are_read():
    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 2)
            self.register_buffer("scale", torch.full((2,), 3.0))

        def forward(self, x):
            return self.fc(x) * self.scale

    model = Scaled()
    step = slicer.training_step(model, lambda m, *b: (m(b[0]) ** 2).mean(), torch.randn(4, 4),
                                optimizer=slicer.SGD(0.1))
    assert step.arg_names == ("input0", "fc.weight", "fc.bias", "scale", "lr", "weight_decay")
    assert step.arg_roles == ("input", "parameter", "parameter", "buffer", "hyper", "hyper")
    assert step.result_names == ("loss", "fc.weight", "fc.bias")


@pytest.mark.slow
def test_from_torch_imports_functions_that_compute_gradients():
    """torch.func.grad_and_value (torch.export traces it) and torch.autograd.grad (it does not: make_fx
    does) give the gradient step torch computes; x ** 2's backward has no math.fpowi (LLVM refuses its i64)."""
    def functional(w, x):
        grad, loss = torch.func.grad_and_value(lambda w: ((x @ w) ** 2).mean())(w)
        return loss, w - 0.1 * grad

    def autograd(w, x):
        w = w.clone().requires_grad_()
        loss = ((x @ w) ** 2).mean()
        (grad,) = torch.autograd.grad(loss, [w])
        return loss.detach(), (w - 0.1 * grad).detach()

    w, x = torch.randn(4, 3), torch.randn(6, 4)
    want = [t.numpy() for t in functional(w, x)]
    for function in (functional, autograd):
        program = slicer.from_torch(function, w, x)
        assert program.arg_names == ("w", "x") and "math.fpowi" not in program.text
        got = data_parallel(program, "x").run(w, x)
        assert all(train.relative_error(g, v) <= 1e-5 for g, v in zip(got, want))


def test_gradients_neither_trace_can_follow_are_a_clear_error():
    def no_requires_grad(w, x):
        return torch.autograd.grad((x @ w).sum(), [w])[0]  # w does not require grad

    with pytest.raises(slicer.FrontendError, match=r"could not import the function .*no_requires_grad: it computes "
                                                   r"gradients.*use slicer.training_step\(model, loss_fn"):
        slicer.from_torch(no_requires_grad, torch.randn(4, 3), torch.randn(6, 4))


@pytest.mark.parametrize("make, message", [
    (lambda: slicer.SGD(0), r"SGD: lr must be > 0, got 0 \(e.g. SGD\(lr=0.1\)\)"),
    (lambda: slicer.SGD("0.1"), r"SGD: lr must be a finite number > 0, got '0.1'"),
    (lambda: slicer.SGD(0.1, momentum=1.0), r"SGD: momentum must be >= 0 and < 1, got 1.0"),
    (lambda: slicer.SGD(0.1, weight_decay=-1), r"SGD: weight_decay must be >= 0, got -1"),
    (lambda: slicer.AdamW(float("nan")), r"AdamW: lr must be a finite number > 0, got nan"),
    (lambda: slicer.AdamW(1e-3, betas=(0.9,)), r"AdamW: betas must be a pair \(beta1, beta2\), e.g. \(0.9, 0.999\)"),
    (lambda: slicer.AdamW(1e-3, betas=(0.9, 1.0)), r"AdamW: betas\[1\] must be >= 0 and < 1, got 1.0"),
    (lambda: slicer.AdamW(1e-3, eps=-1e-8), r"AdamW: eps must be >= 0"),
])
def test_bad_optimizer_settings_are_clear_errors(make, message):
    with pytest.raises(slicer.FrontendError, match=message):
        make()


def test_bad_models_losses_and_batches_are_clear_errors():
    model, loss_fn, batch = train.mlp()
    sgd = slicer.SGD(0.1)
    cases = [
        ((lambda x: x, loss_fn, *batch), {"optimizer": sgd}, r"trains a torch.nn.Module, not a function"),
        ((model, "mse", *batch), {"optimizer": sgd}, r"loss_fn must be a function loss_fn\(model, \*batch\)"),
        ((model, loss_fn), {"optimizer": sgd}, r"needs an example batch"),
        ((model, loss_fn, batch[0], [1.0, 2.0]), {"optimizer": sgd}, r"batch tensor #1 is a list, not a torch.Tensor"),
        ((model, loss_fn, *batch), {"optimizer": torch.optim.SGD(model.parameters(), 0.1)},
         r"optimizer must be slicer.SGD\(lr, ...\) or slicer.AdamW\(lr, ...\), not a SGD"),
        ((model, lambda m, x, y: m(x) - y, *batch), {"optimizer": sgd},
         r"loss_fn must return the loss as a scalar floating tensor, got a torch.float32 tensor of shape \[8, 4\]; "
         r"reduce it"),
        ((model, lambda m, x, y: 1.0, *batch), {"optimizer": sgd}, r"scalar floating tensor, got a float"),
    ]
    for args, kwargs, message in cases:
        with pytest.raises(slicer.FrontendError, match=message):
            slicer.training_step(*args, **kwargs)
    with pytest.raises(slicer.FrontendError, match=r"Sequential module has no parameter that requires grad"):
        slicer.training_step(train.mlp()[0].requires_grad_(False), loss_fn, *batch, optimizer=sgd)
    clashing = train.mlp()[0]
    clashing.register_parameter("step", torch.nn.Parameter(torch.ones(())))
    with pytest.raises(slicer.FrontendError, match=r"parameters or buffers named like the optimizer's state, its "
                                                   r"hyperparameters, the loss or the random state \(step\).*rename"):
        slicer.training_step(clashing, loss_fn, *batch, optimizer=slicer.AdamW(1e-3))
    with pytest.raises(TypeError, match="optimizer"):
        slicer.training_step(model, loss_fn, *batch)  # keyword-only, required
    with pytest.raises(slicer.FrontendError, match=r"seed must be an integer in \[0, 2\^63\), got -1"):
        slicer.training_step(model, loss_fn, *batch, optimizer=sgd, seed=-1)
    # torch's generator is state a program cannot hold: refused, naming the op and the line (dropout is not:
    # test_training_modes.py)
    noisy = lambda m, x, y: F.mse_loss(m(x + torch.randn_like(x)), y)  # noqa: E731
    with pytest.raises(slicer.FrontendError, match=r"aten\.randn_like\.default at .*test_training_step\.py:\d+ "
                                                   r"draws random numbers, but a Slicer program keeps no random"):
        slicer.training_step(model, noisy, *batch, optimizer=sgd)


def test_tensors_a_forward_stores_on_its_modules_are_not_left_traced():
    """An MoE layer keeps its auxiliary loss as `self.aux_loss`: tracing must leave the module as it was (a traced
    tensor there would make the model unusable, e.g. by copy.deepcopy)."""

    class Keeps(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 2)
            self.before = torch.ones(1)

        def forward(self, x):
            out = self.fc(x)
            self.aux = out.square().mean()
            self.before = out.sum()
            return out

    model = Keeps()
    original = model.before
    slicer.training_step(model, lambda m, x: m(x).sum() + m.aux, torch.randn(3, 4), optimizer=slicer.SGD(0.1))
    assert not hasattr(model, "aux") and model.before is original
    copy.deepcopy(model)(torch.randn(3, 4))
