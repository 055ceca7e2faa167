"""Modules in training mode on 2 MPI ranks: 5 AdamW steps of a ResNet-style CNN in training mode (batch norm's
running statistics as state, computed over the global batch: SyncBatchNorm) and of an MLP with dropout (masks from
the step's seed, replayed in torch with `slicer.dropout_mask`), under data parallel and ZeRO-3, equal to torch
eager on the unsharded model: losses, parameters and buffers within 1e-5 (relative, norms)."""

import functools

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import slicer  # noqa: E402
from example_modules import load  # noqa: E402
from slicer import strategies as st  # noqa: E402

modes = load("torch/train_modes.py", "train_modes")
ADAMW = slicer.AdamW(0.01, betas=(0.9, 0.99), weight_decay=0.1)
SEED = 1234


@functools.cache
def imported(name: str):
    model, loss_fn, batch = (modes.resnet if name == "resnet" else modes.dropout_mlp)()
    step = slicer.training_step(model, loss_fn, *batch, optimizer=ADAMW, seed=SEED)
    reference = modes.replayed(model, SEED) if name == "dropout" else model
    return model, loss_fn, batch, step, reference


@pytest.mark.parametrize("name, strategy", [("resnet", "zero3"), ("dropout", "data"), ("dropout", "zero3")])
@pytest.mark.slow
def test_training_mode_steps_on_two_ranks_equal_torch(name, strategy):
    model, loss_fn, batch, step, reference = imported(name)
    tactics = st.data_parallel(step, "x") if strategy == "data" else st.zero(step, "x", stage=3)
    prog = slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=tactics)
    loss_error, state_error, got = modes.compare(model, loss_fn, batch, ADAMW, prog, ranks=2, reference=reference)
    assert loss_error <= 1e-5 and state_error <= 1e-5, (loss_error, state_error)
    if name == "dropout":
        assert np.array_equal(got["rng"], [SEED, 5])
