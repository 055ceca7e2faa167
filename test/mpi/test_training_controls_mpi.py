"""The controls of a training step on 2 MPI ranks: 20 steps of AdamW on the MLP with a warmup + cosine learning
rate schedule and gradient clipping, under data parallel, ZeRO-3 and Megatron, equal to torch eager
(torch.optim.AdamW foreach=False, LambdaLR, clip_grad_norm_); the rate given to every session.step under ZeRO-3 with the
clipping asked by the loss function (torch.nn.utils.clip_grad_norm_). The same on the simulator, and the errors:
test/unit/frontends/test_training_controls.py, whose torch reference this reuses."""

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import slicer  # noqa: E402
from slicer import schedules, strategies  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "frontends"))
import test_training_controls as controls  # noqa: E402

STEPS = controls.STEPS
TACTICS = {"data": lambda step: strategies.data_parallel(step, "x"),
           "zero3": lambda step: strategies.zero(step, "x", stage=3),
           # the sum of squares adds replicated terms (layer 0's) to partial ones (layer 2's): one all_reduce,
           # each replicated term held by the first rank (spmd.partial_terms)
           "megatron": lambda step: strategies.megatron(step, "x", column=["2.*"])}


def run(step, strategy, batch, lrs=None):
    """(losses, state) of STEPS steps of `step` on 2 ranks, the rate `lrs[t]` given to step t if given."""
    prog = slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=TACTICS[strategy](step))
    with prog.session(ranks=2, timeout=300) as session:
        losses = [float(session.step(*batch, **({"lr": lrs[t]} if lrs else {}))) for t in range(STEPS)]
        return losses, session.state_dict()


@pytest.mark.parametrize("strategy", list(TACTICS))
def test_a_scheduled_clipped_adamw_equals_torch_on_two_ranks(strategy):
    model, loss_fn, batch = controls.train.mlp()
    optimizer = slicer.AdamW(schedules.cosine(0.01, STEPS, warmup_steps=5), betas=(0.8, 0.99), weight_decay=0.1,
                             clip_grad_norm=0.5)
    step = slicer.training_step(model, loss_fn, *batch, optimizer=optimizer)
    want_losses, want_params, norms = controls.torch_run(model, loss_fn, batch, optimizer, base_lr=0.01,
                                                         factor=controls.warmup_cosine, max_norm=0.5)
    assert min(norms) < 0.5 < max(norms)
    loss_error, param_error = controls.errors(*run(step, strategy, batch), want_losses, want_params)
    assert loss_error <= 1e-5 and param_error <= 1e-5


def test_the_rate_of_every_step_and_clipping_in_the_loss_function_under_zero3():
    model, loss_fn, batch = controls.train.mlp()

    def clipped_loss(model, x, y):
        loss = loss_fn(model, x, y)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        return loss

    optimizer = slicer.AdamW(0.01, betas=(0.8, 0.99), weight_decay=0.1)
    step = slicer.training_step(model, clipped_loss, *batch, optimizer=optimizer)
    lrs = [0.02 * 0.9 ** t for t in range(STEPS)]
    want_losses, want_params, _ = controls.torch_run(model, loss_fn, batch, optimizer, lrs=lrs, max_norm=0.5)
    loss_error, param_error = controls.errors(*run(step, "zero3", batch, lrs), want_losses, want_params)
    assert loss_error <= 1e-5 and param_error <= 1e-5
