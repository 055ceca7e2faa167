"""PyTorch models converted with `model.to(torch.bfloat16)`: `slicer.from_torch` imports and runs their forward
pass, `slicer.training_step` their training step (partitioned over 2 simulated devices), and sessions save and
load their bf16 state. References: torch eager computing in bf16 (the same rounding points: each op's result)
and float64 on the same bf16 weights and inputs. Tolerances are bf16's: 8 significant bits, ~4e-3 relative per
rounding; Slicer is required to be as close to float64 as torch's bf16 eager is (within 25%), and within ~1e-2
of torch's bf16 results."""

import copy

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import slicer  # noqa: E402
from example_modules import load  # noqa: E402

train = load("torch/train_step.py", "train_step")
BF16 = np.dtype(ml_dtypes.bfloat16)


class Block(torch.nn.Module):
    """A pre-norm transformer block: layernorm, attention (softmax), a gelu MLP, residual adds."""

    def __init__(self, d: int = 32, heads: int = 4):
        super().__init__()
        self.ln = torch.nn.LayerNorm(d)
        self.attn = torch.nn.MultiheadAttention(d, heads, batch_first=True)
        self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        y = self.ln(x)
        x = x + self.attn(y, y, y, need_weights=False)[0]
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(x)))


def rms_error(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.sqrt(np.mean((got - want) ** 2) / np.mean(want ** 2)))


@pytest.mark.slow
def test_bf16_model_forward_runs_as_torch_bf16():
    torch.manual_seed(0)
    model = Block().eval().to(torch.bfloat16)
    x = torch.randn(4, 8, 32).bfloat16()
    exact = copy.deepcopy(model).double()
    with torch.no_grad():
        eager, reference = model(x), exact(x.double()).numpy()
    prog = slicer.compile(slicer.from_torch(model, x), mesh=slicer.Mesh(d=2), tactics=slicer.parse_tactics("x.0=d"))
    got = prog.run(x)
    assert got.dtype == BF16 and got.shape == (4, 8, 32)
    eager_error = rms_error(eager.float().numpy(), reference)
    assert 1e-3 < eager_error < 1e-2  # bf16 rounding, not f32's
    assert rms_error(got, reference) <= 1.25 * eager_error
    assert rms_error(got, eager.float().numpy()) <= 1e-2


@pytest.mark.slow
def test_bf16_training_step_trains_as_torch_bf16(tmp_path):
    model, loss_fn, batch = train.mlp()
    model = model.to(torch.bfloat16)
    batch = tuple(b.bfloat16() for b in batch)
    optimizer = slicer.SGD(0.05, momentum=0.5, weight_decay=0.1)
    step = slicer.training_step(model, loss_fn, *batch, optimizer=optimizer)
    assert "tensor<16x8xbf16> {slicer.name = \"0.weight\"}" in step.text
    prog = slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=[slicer.Tile(arg="x", dim=0, axes="x")])
    with prog.session() as session:
        losses = [float(session.step(*batch)) for _ in range(2)]
        session.save(tmp_path / "ck")
        losses += [float(session.step(*batch)) for _ in range(2)]
        state = session.state_dict()
    assert state["0.weight"].dtype == BF16
    want_losses, want_params = train.torch_steps(model, loss_fn, batch, optimizer, 4, dtype=torch.bfloat16)
    exact_losses, exact_params = train.torch_steps(model, loss_fn, batch, optimizer, 4, dtype=torch.float64)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-2)
    np.testing.assert_allclose(losses, exact_losses, rtol=2e-2)
    for name, want in want_params.items():
        assert train.relative_error(state[name], want) <= 1e-2, name
        assert train.relative_error(state[name], exact_params[name]) <= 2e-2, name
    # the checkpoint holds bf16 state: loaded into a session it trains on the same; as torch tensors, bf16 ones
    with prog.session() as session:
        session.load(tmp_path / "ck")
        again = [float(session.step(*batch)) for _ in range(2)]
        assert all(np.array_equal(v, state[n]) for n, v in session.state_dict().items())
    assert again == losses[2:]
    tensors = slicer.load_checkpoint(tmp_path / "ck", tensors=True)
    assert tensors["0.weight"].dtype == torch.bfloat16


@pytest.mark.slow
def test_bf16_gpt_training_step_trains_as_torch_bf16():
    """A 1-block GPT in bf16 (embeddings and their gradients, layernorm, attention's softmax, cross-entropy over
    the vocabulary), data parallel over the batch: the losses within two bf16 units of torch's bf16 losses (the
    loss is a bf16 scalar: one unit at 4 is 2^-5, 0.8%), the parameters after 3 SGD steps within 1.5%."""
    model, loss_fn, batch = train.gpt(n_layer=1)
    model = model.to(torch.bfloat16)
    optimizer = slicer.SGD(0.05, momentum=0.5, weight_decay=0.1)
    step = slicer.training_step(model, loss_fn, *batch, optimizer=optimizer)
    prog = slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=[slicer.Tile(arg="idx", dim=0, axes="x")])
    with prog.session() as session:
        losses = [float(session.step(*batch)) for _ in range(3)]
        state = session.state_dict()
    want_losses, want_params = train.torch_steps(model, loss_fn, batch, optimizer, 3, dtype=torch.bfloat16)
    np.testing.assert_allclose(losses, want_losses, rtol=2 * 2.0 ** -7)
    assert max(train.relative_error(state[n], w) for n, w in want_params.items()) <= 1.5e-2
