"""Modules in training mode inside slicer.training_step, on the simulator: batch norm's running statistics are
state the step returns (5 AdamW steps of a ResNet-style CNN equal torch's, parameters and running statistics,
under data parallel: SyncBatchNorm over the global batch), dropout's masks come from the step's Philox4x32-10
stream (the Random123 known answers; the same masks on 1 device and tiled over 2, on any dim; 5 AdamW steps equal
torch replaying `slicer.dropout_mask`), the random state advances every step and is checkpointed, eval-mode
batch norm imports, and what still cannot be honoured is a FrontendError naming the op and the line. (The same on
2 MPI ranks, data parallel and ZeRO-3: test/mpi/test_training_modes_mpi.py.)"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import slicer  # noqa: E402
from example_modules import load  # noqa: E402
from slicer import strategies as st  # noqa: E402
from slicer.frontends.randomness import RandomStream, philox4x32  # noqa: E402

modes = load("torch/train_modes.py", "train_modes")
ADAMW = slicer.AdamW(0.01, betas=(0.9, 0.99), weight_decay=0.1)

# Random123's tests/kat_vectors, "philox4x32 10" lines: counter words, key words, output words (hex).
KNOWN_ANSWERS = [
    ("00000000 00000000 00000000 00000000", "00000000 00000000", "6627e8d5 e169c58d bc57ac4c 9b00dbd8"),
    ("ffffffff ffffffff ffffffff ffffffff", "ffffffff ffffffff", "408f276d 41c83b0e a20bc7c6 6d5451fd"),
    ("243f6a88 85a308d3 13198a2e 03707344", "a4093822 299f31d0", "d16cfe09 94fdcceb 5001e420 24126ea1"),
]


def data_parallel(step):
    return slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=st.data_parallel(step, "x"))


@pytest.mark.parametrize("counter, key, output", KNOWN_ANSWERS)
def test_philox_gives_random123s_known_answers_in_numpy_and_torch(counter, key, output):
    words = lambda text: [int(w, 16) for w in text.split()]  # noqa: E731
    with np.errstate(over="ignore"):
        got = philox4x32([np.array([w], np.int64) for w in words(counter)], [np.int64(w) for w in words(key)])
    assert [int(w[0]) for w in got] == words(output)
    got = philox4x32([torch.tensor([w]) for w in words(counter)], [torch.tensor(w) for w in words(key)])
    assert [int(w[0]) for w in got] == words(output)


@pytest.mark.slow
def test_masks_in_the_program_equal_the_reference_on_one_device_and_tiled_on_any_dim():
    """The mask a rank computes for its block is the block of the global mask: arange's linalg.index is offset
    by the partitioner on a tiled dim, so the element indices are global."""
    def masks(x, rng):
        stream = RandomStream(rng)
        return stream.draw(torch, tuple(x.shape), 0.7), stream.draw(torch, tuple(x.shape), 0.7)

    x, rng = torch.randn(6, 5, 4), torch.tensor([12345, 3], dtype=torch.int64)
    program = slicer.from_torch(masks, x, rng)
    want = [slicer.dropout_mask(12345, 3, site, x.shape, 0.3) for site in (0, 1)]
    assert 0.6 < want[0].mean() < 0.8 and not np.array_equal(want[0], want[1])
    for mesh, tactics in ((slicer.Mesh(x=1), []), (slicer.Mesh(x=2), [slicer.Tile(arg="x", dim=0, axes="x")]),
                          (slicer.Mesh(x=2), [slicer.Tile(arg="x", dim=1, axes="x")])):
        got = slicer.compile(program, mesh=mesh, tactics=tactics).run(x, rng)
        assert all(np.array_equal(g, w) for g, w in zip(got, want)), tactics


@pytest.mark.slow
def test_resnet_with_batch_norm_in_training_mode_steps_equal_torch():
    model, loss_fn, batch = modes.resnet()
    step = slicer.training_step(model, loss_fn, *batch, optimizer=ADAMW)
    buffers = [n for n, _ in model.named_buffers()]
    assert step.result_names[1 + len(list(model.parameters())):][:len(buffers)] == tuple(buffers)
    assert "rng" not in step.arg_names  # nothing random: no random state
    loss_error, state_error, got = modes.compare(model, loss_fn, batch, ADAMW, data_parallel(step))
    assert loss_error <= 1e-5 and state_error <= 1e-5
    assert int(got["bn1.num_batches_tracked"]) == 5 and got["bn1.running_mean"].any()


@pytest.mark.slow
def test_batch_norm_with_cumulative_averages_steps_equal_torch():
    """`momentum=None`: the running statistics are the average over the batches seen (torch reads the factor
    1 / num_batches_tracked with float(); the traced step keeps it a tensor)."""
    model, loss_fn, batch = modes.resnet()
    for module in (model.bn1, model.bn2):
        module.momentum = None
    step = slicer.training_step(model, loss_fn, *batch, optimizer=ADAMW)
    loss_error, state_error, got = modes.compare(model, loss_fn, batch, ADAMW, data_parallel(step), steps=3)
    assert loss_error <= 1e-5 and state_error <= 1e-5
    assert int(got["bn2.num_batches_tracked"]) == 3 and got["bn2.running_var"].any()
    assert model.bn1.forward.__func__ is nn.BatchNorm2d.forward  # the module is left as it was


@pytest.mark.slow
def test_dropout_steps_equal_torch_replaying_the_masks_and_the_random_state_is_checkpointed(tmp_path):
    model, loss_fn, batch = modes.dropout_mlp()
    step = slicer.training_step(model, loss_fn, *batch, optimizer=ADAMW, seed=1234)
    assert step.arg_names[-1] == "rng" and step.arg_roles[-1] == "state" and step.result_names[-1] == "rng"
    assert np.array_equal(step.parameters[-1], [1234, 0])
    prog = data_parallel(step)
    loss_error, state_error, got = modes.compare(model, loss_fn, batch, ADAMW, prog,
                                                 reference=modes.replayed(model, 1234))
    assert loss_error <= 1e-5 and state_error <= 1e-5 and np.array_equal(got["rng"], [1234, 5])
    # another seed, other masks: torch's reference with seed 1234 no longer matches
    other = slicer.training_step(model, loss_fn, *batch, optimizer=ADAMW, seed=99)
    assert modes.compare(model, loss_fn, batch, ADAMW, data_parallel(other), steps=1,
                         reference=modes.replayed(model, 1234))[0] > 1e-3
    # the counter is checkpointed: 2 steps, save, 3 more from the checkpoint = 5 steps
    with prog.session() as session:
        session.step(*batch), session.step(*batch)
        session.save(tmp_path / "ckpt")
    with prog.session() as session:
        session.load(tmp_path / "ckpt")
        losses = [float(session.step(*batch)) for _ in range(3)]
        assert np.array_equal(session.state_dict()["rng"], [1234, 5])
    want, _ = modes.torch_steps(modes.replayed(model, 1234), loss_fn, batch, ADAMW, 5)
    assert np.allclose(losses, want[2:], rtol=1e-5)


@pytest.mark.slow
def test_eval_mode_batch_norm_imports_for_training_and_inference():
    """torch-mlir typed eval-mode batch norm's saved statistics tensor<0xf32> (a cast error); decomposed, it
    imports, and the buffers are read, not returned."""
    model, loss_fn, batch = modes.resnet()
    model.eval()
    step = slicer.training_step(model, loss_fn, *batch, optimizer=ADAMW)
    assert not any("running" in n for n in step.result_names)
    loss_error, state_error, _ = modes.compare(model, loss_fn, batch, ADAMW, data_parallel(step), steps=2)
    assert loss_error <= 1e-5 and state_error <= 1e-5
    inference = slicer.from_torch(model, batch[0])
    got = slicer.compile(inference, mesh=slicer.Mesh(x=2), tactics=[slicer.Tile(arg="x", dim=0, axes="x")]).run(
        batch[0])
    with torch.no_grad():
        assert np.allclose(got, model(batch[0]).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_what_cannot_be_honoured_is_a_clear_error_naming_the_op_and_line():
    mlp, loss_fn, batch = modes.dropout_mlp()
    with pytest.raises(slicer.FrontendError, match=r"dropout in training mode draws random numbers at "
                                                   r".*train_modes\.py:\d+, and this import has no random state: "
                                                   r"call \.eval\(\)"):
        slicer.from_torch(mlp, batch[0])
    assert slicer.from_torch(mlp.eval(), batch[0]).arg_names[0] == "x"

    class Noisy(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 4)

        def forward(self, x):
            return self.fc(x) + torch.rand(4)  # torch's generator: state a program cannot hold

    with pytest.raises(slicer.FrontendError, match=r"aten\.rand\.default at .*test_training_modes\.py:\d+ draws "
                                                   r"random numbers, but a Slicer program keeps no random generator"):
        slicer.training_step(Noisy(), lambda m, x, y: F.mse_loss(m(x), y), *batch, optimizer=ADAMW)


@pytest.mark.parametrize("offset", [0.0, 1e3])
def test_one_pass_batch_statistics_equal_torchs_two_pass_ones(offset):
    """The training-mode variance E[x^2] - E[x]^2 from f64 sums (one pass, `stateful._batch_moments`) is torch's
    two-pass f64 variance rounded to f32, also where the mean is 1000 standard deviations from zero."""
    from slicer.frontends.stateful import _batch_moments

    x = torch.randn(8, 16, 5, 7, generator=torch.Generator().manual_seed(0)) + offset
    mean, var = _batch_moments(torch, x, [1, 16, 1, 1])
    exact = x.double().var(dim=(0, 2, 3), correction=0, keepdim=True)
    assert mean.dtype == var.dtype == torch.float32
    assert torch.equal(var, exact.float())
    assert torch.allclose(mean.double(), x.double().mean(dim=(0, 2, 3), keepdim=True), rtol=1e-6, atol=1e-6)
