"""Mixed precision in imported programs, on the simulator: half-precision sums accumulate in f32 as torch's do
(`frontends/accumulators.py`), and `training_step(..., precision=slicer.MixedPrecision(...))` computes on
half-precision copies of f32 master parameters (`frontends/precision.py`): its steps under data parallel equal
torch running the same policy by hand (a half-precision copy of the model, f32 gradients and update)."""

import copy
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import slicer  # noqa: E402
from slicer import strategies as st  # noqa: E402

HALF = {"f16": torch.float16, "bf16": torch.bfloat16}
TOLERANCE = {"f16": 2e-3, "bf16": 2 ** -6}
"""Relative to the largest element: a few roundings of each type (unit roundoff 2^-11 and 2^-8); Slicer and torch
round at different points (one rounding per fused op; per-device partial sums)."""


def test_a_half_precision_sum_accumulates_in_f32():
    """4096 ones summed in f16 stop at 2048 (2049 is not an f16); torch's sum, and Slicer's, give 4096."""
    ones = torch.ones(4096, 3, dtype=torch.float16)
    program = slicer.from_torch(lambda x: x.sum(0), ones)
    assert "arith.addf %in, %out : f16" not in program.text and "-> tensor<3xf32>" in program.text
    got = slicer.compile(program, mesh=slicer.Mesh(x=2), tactics=[slicer.Tile(arg="x", dim=0, axes="x")]).run(ones)
    assert got.dtype == np.float16 and np.array_equal(got, ones.sum(0).numpy()) and got[0] == 4096


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.LayerNorm(64),
                               torch.nn.Linear(64, 8))


def _loss(model, x, y):
    return torch.nn.functional.cross_entropy(model(x), y)


def _policy_by_hand(model, batches, lr, dtype, output_dtype=None):
    """(losses, final parameters) of SGD steps under the policy, in torch: a `dtype` copy of the model computes
    the loss (in f32; from its outputs cast to `output_dtype` if given) and the gradients, which are widened and
    applied to the f32 master parameters."""
    master, losses = copy.deepcopy(model), []
    for x, y in batches:
        compute = copy.deepcopy(master).to(dtype)
        out = compute(x.to(dtype))
        loss = torch.nn.functional.cross_entropy(out if output_dtype is None else out.to(output_dtype), y).float()
        loss.backward()
        with torch.no_grad():
            for p, c in zip(master.parameters(), compute.parameters()):
                p -= lr * c.grad.float()
        losses.append(loss.item())
    return losses, {n: p.detach().numpy() for n, p in master.named_parameters()}


def _assert_session_steps(prog, batches, want_losses, want: dict, tolerance: float) -> tuple[list, dict]:
    """Run `batches` through a session of `prog`: its losses within `tolerance` (relative) of `want_losses`, its
    final parameters within `tolerance` of the largest element of `want`'s (by name). Returns the losses and the
    final state (`state_dict()`)."""
    with prog.session() as session:
        losses = [float(session.step(x.numpy(), y.numpy())) for x, y in batches]
        got = session.state_dict()
    assert np.allclose(losses, want_losses, rtol=tolerance), (losses, want_losses)
    for name, value in want.items():
        assert np.abs(got[name] - value).max() <= tolerance * np.abs(value).max(), name
    return losses, got


STRATEGIES = {"data": lambda step: st.data_parallel(step, "x"), "zero3": lambda step: st.zero(step, "x", stage=3)}


def _collective_types(prog) -> set[tuple[str, str]]:
    """{(collective, element type)} of the compiled program's collectives (from `explain()`)."""
    return set(re.findall(r"^  (all_gather|all_reduce|reduce_scatter) %\d+ -> %\d+: (\w+)\[", prog.explain(),
                          re.MULTILINE))


@pytest.mark.slow
@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
@pytest.mark.parametrize("param_dtype", sorted(HALF))
def test_mixed_precision_steps_equal_the_policy_run_by_hand(param_dtype, strategy):
    model = _mlp()
    torch.manual_seed(1)
    batches = [(torch.randn(8, 16), torch.randint(0, 8, (8,))) for _ in range(3)]
    step = slicer.training_step(model, _loss, *batches[0], optimizer=slicer.SGD(0.1),
                                precision=slicer.MixedPrecision(param_dtype=param_dtype))
    assert step.parameters[0].dtype == torch.float32  # the master parameters
    half = f"x{param_dtype}>"
    assert f"tensor<8x16{half}" in step.text and f"tensor<8x64{half}" in step.text  # the input and activations
    prog = slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=STRATEGIES[strategy](step))
    kinds = _collective_types(prog)
    if strategy == "zero3":  # parameters gathered as half-precision copies, gradients summed in f32
        assert {t for c, t in kinds if c == "all_gather"} == {param_dtype}, kinds
        assert {t for c, t in kinds if c == "reduce_scatter"} == {"f32"}, kinds
    else:
        assert {t for c, t in kinds if c == "all_reduce"} <= {"f32", "i64"}, kinds
    want_losses, want = _policy_by_hand(model, batches, 0.1, HALF[param_dtype])
    _, got = _assert_session_steps(prog, batches, want_losses, want, TOLERANCE[param_dtype])
    # each trained parameter's compute copy is state the update wrote: its rounding, bit for bit
    half = HALF[param_dtype]
    for name in want:
        copy = got[f"{param_dtype}.{name}"]
        rounded = torch.from_numpy(got[name]).to(half).view(torch.int16).numpy()
        assert copy.dtype.itemsize == 2 and np.array_equal(copy.view(np.int16), rounded), name


@pytest.mark.slow
def test_outputs_cast_to_f32_give_an_f32_loss_equal_to_the_policy_run_by_hand():
    """`output_dtype="f32"` (FSDP2's): the model's bf16 logits are widened, the cross-entropy is computed in f32."""
    model = _mlp()
    torch.manual_seed(1)
    batches = [(torch.randn(8, 16), torch.randint(0, 8, (8,))) for _ in range(2)]
    policy = slicer.MixedPrecision(param_dtype="bf16", output_dtype="f32")
    step = slicer.training_step(model, _loss, *batches[0], optimizer=slicer.SGD(0.1), precision=policy)
    prog = slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=st.data_parallel(step, "x"))
    want_losses, want = _policy_by_hand(model, batches, 0.1, torch.bfloat16, torch.float32)
    bf16_losses, _ = _policy_by_hand(model, batches, 0.1, torch.bfloat16)
    losses, _ = _assert_session_steps(prog, batches, want_losses, want, TOLERANCE["bf16"])
    # the first step's loss is an f32 cross-entropy of the same bf16 logits: equal to 1e-6, not to a bf16 one's
    assert abs(losses[0] / want_losses[0] - 1) <= 1e-6 < abs(bf16_losses[0] / want_losses[0] - 1), losses


@pytest.mark.parametrize("policy, message", [
    (dict(reduce_dtype="bf16"), r"reduce_dtype 'bf16' is not supported: Slicer sums gradients across devices in f32"),
    (dict(param_dtype="fp8"), r"param_dtype must be one of bf16, f16, f32, got 'fp8'"),
    (dict(output_dtype="f64"), r"output_dtype must be one of bf16, f16, f32, got 'f64'"),
])
def test_a_bad_policy_is_a_clear_error(policy, message):
    with pytest.raises(slicer.FrontendError, match=message):
        slicer.MixedPrecision(**policy)


def test_precision_must_be_a_policy():
    model = _mlp()
    with pytest.raises(slicer.FrontendError, match=r"precision must be a slicer.MixedPrecision"):
        slicer.training_step(model, _loss, torch.randn(8, 16), torch.randint(0, 8, (8,)),
                             optimizer=slicer.SGD(0.1), precision="bf16")


@pytest.mark.slow
@pytest.mark.parametrize("param_dtype", sorted(HALF))
def test_a_loss_function_under_torch_autocast_steps_equal_torch(param_dtype):
    """The loss function itself asks for autocast (`torch.autocast("cpu", dtype=...)`): the trace records
    autocast's casts, and the steps under data parallel equal torch eager's."""
    model = _mlp()

    def loss_fn(model, x, y):
        with torch.autocast("cpu", dtype=HALF[param_dtype]):
            return _loss(model, x, y)

    torch.manual_seed(1)
    batches = [(torch.randn(8, 16), torch.randint(0, 8, (8,))) for _ in range(3)]
    reference = copy.deepcopy(model)
    step = slicer.training_step(model, loss_fn, *batches[0], optimizer=slicer.SGD(0.1))
    assert f"x{param_dtype}>" in step.text
    prog = slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=st.data_parallel(step, "x"))
    optimizer, want = torch.optim.SGD(reference.parameters(), 0.1), []
    for x, y in batches:
        optimizer.zero_grad()
        loss = loss_fn(reference, x, y)
        loss.backward()
        optimizer.step()
        want.append(loss.item())
    _assert_session_steps(prog, batches, want, {n: p.detach().numpy() for n, p in reference.named_parameters()},
                          TOLERANCE[param_dtype])


@pytest.mark.slow
def test_batch_norm_buffers_stay_f32_and_take_their_running_statistics():
    """The policy casts parameters, not buffers (as FSDP2): a batch norm in training mode writes its running
    statistics into its f32 buffers, which the step returns updated."""
    from example_modules import load

    model, loss_fn, batch = load("torch/train_modes.py", "train_modes").resnet()
    step = slicer.training_step(model, loss_fn, *batch, optimizer=slicer.SGD(0.1),
                                precision=slicer.MixedPrecision(param_dtype="bf16"))
    prog = slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=st.data_parallel(step, "x"))
    with prog.session() as session:
        for _ in range(2):
            session.step(*(b.numpy() for b in batch))
        got = session.state_dict()
    assert got["bn1.running_mean"].dtype == np.float32 and int(got["bn1.num_batches_tracked"]) == 2
    assert not np.array_equal(got["bn1.running_mean"], model.bn1.running_mean.numpy())
