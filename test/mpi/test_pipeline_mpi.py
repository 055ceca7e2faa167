"""Pipeline parallelism on 2 MPI ranks: a GPT cut into 2 stages (`strategies.pipeline`, 1F1B, 4 micro-batches),
each rank running its stage's programs and sending activations and gradients to the other; 3 AdamW steps equal
torch's accumulation loop over the same micro-batches on the whole model (losses and every parameter within
1e-5); with remat in each stage (SGD); and with Megatron over a second axis on 4 ranks. (In process, SGD:
test/unit/pipelining/.)"""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import slicer  # noqa: E402
from example_modules import load  # noqa: E402
from slicer import strategies as st  # noqa: E402

pipeline = load("torch/pipeline.py", "pipeline")


@pytest.mark.slow
def test_two_stages_on_two_ranks_equal_torch():
    model, loss_fn, batch = pipeline.train_step.gpt(n_layer=2, batch=8)
    pipeline.train_step.freeze_attention_bias(model)  # Adam amplifies the rounding noise of a zero gradient
    optimizer = slicer.AdamW(0.01, betas=(0.9, 0.99), weight_decay=0.1)
    _, prog = pipeline.pipelined(model, loss_fn, batch, optimizer, split=["blocks.1"], microbatches=4)
    loss_error, state_error, got = pipeline.compare(model, loss_fn, batch, optimizer, prog, 4, ranks=2)
    assert loss_error <= 1e-5 and state_error <= 1e-5, (loss_error, state_error)
    assert float(got["step"]) == 3.0


@pytest.mark.slow
def test_two_stages_times_two_way_megatron_on_four_ranks_equal_torch():
    """Pipeline over p composed with Megatron over x (4 ranks, oversubscribed: correctness only): each stage's
    MLPs split over x (c_fc by output features, c_proj by input features); the activations, the saved values and
    the accumulated gradients pass between the stage's programs in one layout, and the activations between the
    ranks of equal x. (Data parallel over x takes the same stage layouts.)"""
    model, loss_fn, batch = pipeline.train_step.gpt(n_layer=2, batch=8)
    optimizer = slicer.SGD(0.1, momentum=0.9)
    mlp = {"column": ["blocks.*.mlp.c_fc.*"], "row": ["blocks.*.mlp.c_proj.weight"]}
    _, prog = pipeline.pipelined(model, loss_fn, batch, optimizer, split=["blocks.1"], microbatches=2,
                                 mesh=slicer.Mesh(p=2, x=2), strategy=lambda step: st.megatron(step, "x", **mlp))
    loss_error, state_error, _ = pipeline.compare(model, loss_fn, batch, optimizer, prog, 2, ranks=4)
    assert loss_error <= 1e-5 and state_error <= 1e-5, (loss_error, state_error)


@pytest.mark.slow
def test_remat_in_each_stage_on_two_ranks_equals_torch():
    """Remat `full` on every block under 1F1B on 2 ranks: each stage's backward recomputes its blocks' forward
    from their saved inputs; 3 SGD steps equal torch's (the in-process tests: test/unit/pipelining/)."""
    model, loss_fn, batch = pipeline.train_step.gpt(n_layer=2, batch=4)
    optimizer = slicer.SGD(0.1, momentum=0.9)
    _, prog = pipeline.pipelined(model, loss_fn, batch, optimizer, split=["blocks.1"], microbatches=2,
                                 strategy=lambda step: st.remat(step, "blocks.*", "full"))
    assert [[u.name for u in s.remat] for s in prog.stage_programs] == [["blocks.0"], ["blocks.1"]]
    loss_error, state_error, _ = pipeline.compare(model, loss_fn, batch, optimizer, prog, 2, ranks=2)
    assert loss_error <= 1e-5 and state_error <= 1e-5, (loss_error, state_error)
