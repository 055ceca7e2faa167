"""Pipeline parallelism on 2 MPI ranks: a GPT cut into 2 stages (`strategies.pipeline`, 1F1B, 4 micro-batches),
each rank running its stage's programs and sending activations and gradients to the other; 3 AdamW steps equal
torch's accumulation loop over the same micro-batches on the whole model (losses and every parameter within
1e-5). (In process, SGD: test/unit/pipelining/test_pipeline_program.py.)"""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import slicer  # noqa: E402
from example_modules import load  # noqa: E402

pipeline = load("torch/pipeline.py", "pipeline")


@pytest.mark.slow
def test_two_stages_on_two_ranks_equal_torch():
    model, loss_fn, batch = pipeline.train_step.gpt(n_layer=2, batch=8)
    optimizer = slicer.AdamW(0.01, betas=(0.9, 0.99), weight_decay=0.1)
    _, prog = pipeline.pipelined(model, loss_fn, batch, optimizer, split=["blocks.1"], microbatches=4)
    loss_error, state_error, got = pipeline.compare(model, loss_fn, batch, optimizer, prog, 4, ranks=2)
    assert loss_error <= 1e-5 and state_error <= 1e-5, (loss_error, state_error)
    assert float(got["step"]) == 3.0
