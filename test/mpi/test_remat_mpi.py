"""Rematerialisation on a real training step: the 2-block GPT of examples/training/model.py (SGD with
momentum), data parallel and Megatron on 2 devices, each with remat `full` and `save_dots` on every block, run
3 steps in a session on the simulator and on 2 MPI ranks (and data parallel on 1 rank): equal to the step without
remat within a few roundings (the recomputed values have the same bits, but the clones join the backward's
kernels, and the backward's own sums may then run in another order: under Megatron with `save_dots` the q, k and
v biases' gradients differ in their last bits; docs/remat.md, "Results"), equal to torch eager, and the Megatron
all_reduces not run again."""

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import slicer  # noqa: E402
from example_modules import load  # noqa: E402
from slicer import strategies as st  # noqa: E402

train = load("torch/train_step.py", "train_step")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "training"))
import model as gpt_model  # noqa: E402

SGD = slicer.SGD(0.1, momentum=0.9)
STEPS = 3


@pytest.fixture(scope="module")
def gpt():
    torch.manual_seed(0)
    model = gpt_model.GPT(vocab=16, seq=8, d_model=16, n_head=2, n_layer=2)
    batch = gpt_model.batch(torch.Generator().manual_seed(0), 4, 8, 16)
    return model, batch, slicer.training_step(model, gpt_model.loss_fn, *batch, optimizer=SGD)


def strategy(kind, step, devices):
    if kind == "data":
        return slicer.Mesh(x=devices), st.data_parallel(step, "x")
    return slicer.Mesh(y=devices), st.megatron(step, "y", **gpt_model.MEGATRON)


def run(prog, batch, ranks):
    losses, state = train.slicer_steps(prog, batch, STEPS, ranks)
    return losses, {name: np.asarray(value) for name, value in state.items()}


@pytest.mark.slow
@pytest.mark.parametrize("kind, devices, ranks", [("data", 2, (None, 2)), ("megatron", 2, (None, 2)),
                                                  ("data", 1, (1,))])
def test_remat_equals_the_step_without_it_and_torch(gpt, kind, devices, ranks):
    model, batch, step = gpt
    mesh, tactics = strategy(kind, step, devices)
    plain = slicer.compile(step, mesh=mesh, tactics=tactics)
    want_losses, want_params = train.torch_steps(model, gpt_model.loss_fn, batch, SGD, STEPS)
    base = {count: run(plain, batch, count) for count in ranks}
    for policy in ("full", "save_dots"):
        prog = slicer.compile(step, mesh=mesh, tactics=tactics + st.remat(step, "blocks.*", policy))
        assert "slicer.remat" in prog.spmd
        assert prog.spmd.count("shard.all_reduce") == plain.spmd.count("shard.all_reduce")  # none run again
        for count in ranks:
            losses, state = run(prog, batch, count)
            base_losses, base_state = base[count]
            assert max(train.relative_error(g, w) for g, w in zip(losses, base_losses, strict=True)) <= 1e-6
            for name, value in base_state.items():
                # absolute floor: the keys' bias gets a gradient of rounding noise only (softmax ignores it)
                assert np.allclose(state[name], value, rtol=1e-6, atol=1e-9), (policy, count, name)
            assert max(train.relative_error(g, w) for g, w in zip(losses, want_losses, strict=True)) <= 1e-5
            assert max(train.relative_error(state[n], w) for n, w in want_params.items()) <= 1e-5
