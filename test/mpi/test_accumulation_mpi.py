"""Gradient accumulation on 2 MPI ranks, data parallel and ZeRO-3: 3 AdamW steps of `training_step(...,
microbatches=k)` equal torch's accumulation loop on the unsharded model (`loss / k` per micro-batch, backward,
clip_grad_norm_, step; foreach=False) within 1e-5: an MLP with k=4 and clipping by global norm, and an MLP with
dropout with k=2 (torch replaying the whole batch's masks at each micro-batch's rows)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import slicer  # noqa: E402
from example_modules import load  # noqa: E402
from slicer import strategies as st  # noqa: E402

accumulation = load("torch/accumulation.py", "accumulation")
modes, train_step = accumulation.train_modes, accumulation.train_step  # the modules its reference knows
SEED = 1234


def compiled(step, strategy):
    tactics = st.data_parallel(step, "x") if strategy == "data" else st.zero(step, "x", stage=3)
    return slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=tactics)


@pytest.mark.parametrize("strategy", ["data", "zero3"])
@pytest.mark.slow
def test_accumulated_steps_with_clipping_on_two_ranks_equal_torch(strategy):
    model, loss_fn, batch = train_step.mlp(batch=16)
    optimizer = slicer.AdamW(0.01, betas=(0.9, 0.99), weight_decay=0.1, clip_grad_norm=0.5)
    step = slicer.training_step(model, loss_fn, *batch, optimizer=optimizer, microbatches=4)
    loss_error, state_error, _ = accumulation.compare(model, loss_fn, batch, optimizer, compiled(step, strategy), 4,
                                                      ranks=2, max_norm=0.5)
    assert loss_error <= 1e-5 and state_error <= 1e-5, (loss_error, state_error)


@pytest.mark.parametrize("strategy", ["data", "zero3"])
@pytest.mark.slow
def test_accumulated_dropout_steps_on_two_ranks_equal_torch_replaying_the_masks(strategy):
    model, loss_fn, batch = modes.dropout_mlp(batch=8)
    optimizer = slicer.AdamW(0.01, betas=(0.9, 0.99), weight_decay=0.1)
    step = slicer.training_step(model, loss_fn, *batch, optimizer=optimizer, seed=SEED, microbatches=2)
    loss_error, state_error, got = accumulation.compare(model, loss_fn, batch, optimizer, compiled(step, strategy),
                                                        2, ranks=2, reference=modes.replayed(model, SEED))
    assert loss_error <= 1e-5 and state_error <= 1e-5, (loss_error, state_error)
    assert np.array_equal(got["rng"], [SEED, 3])
