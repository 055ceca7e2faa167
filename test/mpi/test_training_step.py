"""slicer.training_step on 2 MPI ranks: 5 AdamW steps of a 2-block GPT (cross-entropy on the next tokens),
data parallel over x, each step's results fed back as the next step's arguments, equal to torch eager with
torch.optim.AdamW (foreach=False). (Every optimizer on the simulator: test/unit/frontends/test_training_step.py.)"""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

from example_modules import load  # noqa: E402

import slicer  # noqa: E402

train = load("torch/train_step.py", "train_step")


def test_gpt_adamw_steps_on_2_ranks_equal_torch():
    model, loss_fn, batch = train.gpt()
    train.freeze_attention_bias(model)  # see there: the keys' bias gradient is rounding noise Adam amplifies
    optimizer = slicer.AdamW(0.01, weight_decay=0.1)
    step = slicer.training_step(model, loss_fn, *batch, optimizer=optimizer)
    prog = slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=[slicer.Tile(arg="idx", dim=0, axes="x")])
    loss_error, param_error = train.compare(model, loss_fn, batch, optimizer, prog, step, ranks=2)
    assert loss_error <= 1e-5 and param_error <= 1e-5
