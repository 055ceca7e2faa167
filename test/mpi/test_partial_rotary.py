"""A GPT-NeoX-style block (examples/torch/neox.py: fused per-head QKV cut by slicing, partial rotary: slices of
slices of slices along the last dim) imported with the cleanup on, trained 3 steps of AdamW under data parallel
and Megatron on 2 MPI ranks (and the simulator): losses and final parameters equal torch eager's within 1e-5,
no strategy degraded, no all_gather."""

import warnings

import pytest

pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import slicer
from example_modules import collective_ops, load
from slicer import strategies as st

train = load("torch/train_step.py", "train_step")
neox = load("torch/neox.py", "neox")


@pytest.fixture(scope="module")
def imported():
    model, loss_fn, batch = neox.regression()
    optimizer = slicer.AdamW(0.01, weight_decay=0.1)
    return model, loss_fn, batch, optimizer, slicer.training_step(model, loss_fn, *batch, optimizer=optimizer)


@pytest.mark.parametrize("strategy", ["data", "megatron"])
@pytest.mark.slow
def test_partial_rotary_trains_equal_to_torch_on_two_ranks_without_degrading(imported, strategy):
    model, loss_fn, batch, optimizer, step = imported
    if strategy == "data":
        mesh, tactics = slicer.Mesh(x=2), st.data_parallel(step, "x")
    else:
        mesh, tactics = slicer.Mesh(y=2), st.megatron(step, "y", **neox.MEGATRON)
    with warnings.catch_warnings():
        warnings.simplefilter("error", slicer.DegradedStrategy)
        prog = slicer.compile(step, mesh=mesh, tactics=tactics)
    assert "shard.all_gather" not in collective_ops(prog)
    for ranks in (None, 2):
        loss_error, param_error = train.compare(model, loss_fn, batch, optimizer, prog, steps=3, ranks=ranks)
        assert loss_error <= 1e-5 and param_error <= 1e-5, (ranks, loss_error, param_error)
