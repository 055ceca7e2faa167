"""A session started from torch: a model and a torch.optim optimizer after some steps in torch eager, their state
under the training step's names (`slicer.torch_state`), steps on in a session equal to torch going on."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import slicer  # noqa: E402
from example_modules import load  # noqa: E402
from slicer import strategies as st  # noqa: E402
from slicer.core.errors import FrontendError  # noqa: E402

train = load("torch/train_step.py", "train_step")


@pytest.mark.parametrize("optimizer", [slicer.AdamW(0.01, weight_decay=0.1), slicer.SGD(0.1, momentum=0.9)],
                         ids=["adamw", "sgd"])
@pytest.mark.slow
def test_a_session_goes_on_from_torch_state(optimizer):
    model, loss_fn, batch = train.mlp()
    step = slicer.training_step(model, loss_fn, *batch, optimizer=optimizer)
    prog = slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=st.data_parallel(step, "x"))
    opt = train.torch_optimizer(optimizer, model.parameters())
    losses = []
    for _ in range(4):
        if len(losses) == 2:
            state = slicer.torch_state(model, opt)
            with prog.session(state=state) as s:
                got = [float(s.step(*batch)) for _ in range(2)]
                got_state = s.state_dict()
        opt.zero_grad()
        loss = loss_fn(model, *batch)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    np.testing.assert_allclose(got, losses[2:], rtol=1e-5)
    for name, param in model.named_parameters():
        assert train.relative_error(got_state[name], param.detach().numpy()) < 1e-5, name


def test_an_optimizer_without_a_counterpart_is_refused():
    model, _, _ = train.mlp()
    with pytest.raises(FrontendError, match="optimizer Adagrad has no slicer counterpart"):
        slicer.torch_state(model, torch.optim.Adagrad(model.parameters()))
    with pytest.raises(FrontendError, match="takes a torch.nn.Module"):
        slicer.torch_state({"w": torch.zeros(2)})
