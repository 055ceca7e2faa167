"""Gradient accumulation (`slicer.training_step(..., microbatches=k)`) on the simulator, data parallel over 2
devices: 3 AdamW steps equal torch's accumulation loop (`loss / k` per micro-batch, backward, clip_grad_norm_,
step; foreach=False) within 1e-5 for k = 2 and 4, with clipping, with dropout (torch replaying the whole batch's
masks at each micro-batch's rows) and with batch norm in training mode (per-micro-batch statistics, running
statistics updated k times); the masks of a micro-batch are the whole batch's at its samples; a bad k is a
FrontendError; the compiled peak with k=4 is below k=1's. (2 MPI ranks: test/mpi/test_accumulation_mpi.py.)"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import slicer  # noqa: E402
from example_modules import load  # noqa: E402
from slicer import strategies as st  # noqa: E402
from slicer.frontends.randomness import RandomStream  # noqa: E402

accumulation = load("torch/accumulation.py", "accumulation")
modes, train_step = accumulation.train_modes, accumulation.train_step  # the modules its reference knows
ADAMW = slicer.AdamW(0.01, betas=(0.9, 0.99), weight_decay=0.1)
SEED = 1234


def data_parallel(step):
    return slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=st.data_parallel(step, "x"))


@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.slow
def test_accumulated_steps_with_clipping_equal_torchs_accumulation_loop(k):
    model, loss_fn, batch = train_step.mlp(batch=16)
    optimizer = slicer.AdamW(0.01, betas=(0.9, 0.99), weight_decay=0.1, clip_grad_norm=0.5)
    step = slicer.training_step(model, loss_fn, *batch, optimizer=optimizer, microbatches=k)
    loss_error, state_error, _ = accumulation.compare(model, loss_fn, batch, optimizer, data_parallel(step), k,
                                                      max_norm=0.5)
    assert loss_error <= 1e-5 and state_error <= 1e-5, (loss_error, state_error)
    # the clipping bites: torch's steps with and without it differ
    unclipped = accumulation.torch_accumulation_steps(model, loss_fn, batch, ADAMW, 1, k)[1]
    clipped = accumulation.torch_accumulation_steps(model, loss_fn, batch, optimizer, 1, k, max_norm=0.5)[1]
    assert max(train_step.relative_error(clipped[n], unclipped[n]) for n in clipped) > 1e-4


def test_dropout_masks_of_a_micro_batch_are_the_whole_batchs_at_its_samples():
    """Dim 0 holding whole samples (c rows each: [B, ...] or [B * S, ...]): the rows of the whole batch's mask;
    other tensors: distinct draws."""
    rng = torch.tensor([SEED, 2], dtype=torch.int64)
    for shape, per_sample in (((4, 3, 5), 1), ((12, 5), 3)):
        whole = slicer.dropout_mask(SEED, 2, 0, (shape[0] * 2, *shape[1:]), 0.5)
        for micro in range(2):
            stream = RandomStream(rng)
            stream.start_micro_batch(micro, 2, 4)  # 4 samples per micro-batch
            got = stream.draw(torch, shape, 0.5).numpy()
            rows = (np.arange(shape[0]) // per_sample * 2 + micro) * per_sample + np.arange(shape[0]) % per_sample
            assert np.array_equal(got, whole[rows]), (shape, micro)
    stream = RandomStream(rng)
    draws = []
    for micro in range(2):  # dim 0 (size 3) is not the batch's (4 samples): distinct, in-range draws
        stream.start_micro_batch(micro, 2, 4)
        draws.append(stream.draw(torch, (3, 4), 0.5).numpy())
    assert not np.array_equal(draws[0], draws[1])


@pytest.mark.slow
def test_dropout_steps_equal_torch_replaying_the_whole_batchs_masks():
    model, loss_fn, batch = modes.dropout_mlp(batch=8)
    step = slicer.training_step(model, loss_fn, *batch, optimizer=ADAMW, seed=SEED, microbatches=2)
    loss_error, state_error, got = accumulation.compare(model, loss_fn, batch, ADAMW, data_parallel(step), 2,
                                                        reference=modes.replayed(model, SEED))
    assert loss_error <= 1e-5 and state_error <= 1e-5, (loss_error, state_error)
    assert np.array_equal(got["rng"], [SEED, 3])  # one step, one counter: the micro-batches share it


@pytest.mark.slow
def test_batch_norm_normalizes_each_micro_batch_and_updates_the_running_statistics_k_times():
    model, loss_fn, batch = modes.resnet(batch=4)
    step = slicer.training_step(model, loss_fn, *batch, optimizer=ADAMW, microbatches=2)
    loss_error, state_error, got = accumulation.compare(model, loss_fn, batch, ADAMW, data_parallel(step), 2)
    assert loss_error <= 1e-5 and state_error <= 1e-5, (loss_error, state_error)
    assert int(got["bn1.num_batches_tracked"]) == 6  # torch's loop normalizes each micro-batch by its statistics


def test_a_bad_microbatches_is_a_clear_error():
    model, loss_fn, batch = train_step.mlp(batch=6)
    with pytest.raises(slicer.FrontendError, match=r"microbatches=4 cuts every batch tensor into 4 equal "
                                                   r"micro-batches along dim 0, but batch tensor #0 has dim 0 of "
                                                   r"size 6; pass a batch whose dim 0 is a multiple of 4"):
        slicer.training_step(model, loss_fn, *batch, optimizer=ADAMW, microbatches=4)
    for bad in (0, -1, 2.0, True, "2"):
        with pytest.raises(slicer.FrontendError, match=r"microbatches must be an integer >= 1"):
            slicer.training_step(model, loss_fn, *batch, optimizer=ADAMW, microbatches=bad)
    with pytest.raises(slicer.FrontendError, match=r"batch tensor #1 has a 0-d tensor"):
        slicer.training_step(model, lambda m, x, s: (m(x) * s).mean(), batch[0], torch.tensor(2.0),
                             optimizer=ADAMW, microbatches=2)


@pytest.mark.slow
def test_the_compiled_peak_with_four_micro_batches_is_below_one():
    """The micro-batches run one after the other and each one's activations die before the next starts (the
    accumulation's fences keep the additions of the gradients where they are, `cleanup.py`)."""
    peaks = {}
    for k in (1, 4):
        model, loss_fn, batch = train_step.gpt(batch=16, seq=16, d_model=16, n_head=2, vocab=64, n_layer=1)
        step = slicer.training_step(model, loss_fn, *batch, optimizer=ADAMW, microbatches=k)
        report = data_parallel(step).memory()
        peaks[k] = report.peak - report.argument_bytes
    assert peaks[4] < 0.75 * peaks[1], peaks
