"""Pipeline parallelism on 2 MPI ranks: a GPT cut into 2 stages (`strategies.pipeline`, 1F1B, 4 micro-batches),
each rank running its stage's programs and sending activations and gradients to the other; AdamW steps in a
session equal torch's accumulation loop over the same micro-batches on the whole model (losses and every
parameter within 1e-5), across checkpoints to and from data parallel; with remat in each stage (SGD); and with
Megatron over a second axis on 4 ranks. (In process, SGD: test/unit/pipelining/.)"""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import numpy as np  # noqa: E402

import slicer  # noqa: E402
from example_modules import load  # noqa: E402
from slicer import strategies as st  # noqa: E402

pipeline = load("torch/pipeline.py", "pipeline")
accumulation = load("torch/accumulation.py", "accumulation")


@pytest.mark.slow
def test_two_stages_on_two_ranks_equal_torch_across_a_checkpoint_under_data_parallel(tmp_path):
    """One session on 2 ranks (one job: the stages loaded once, each step sends its micro-batches): 3 steps equal
    torch; its checkpoint loads under data parallel bit for bit, which takes step 4; its checkpoint loads back
    under the pipeline, bit for bit, which takes step 5, equal to torch."""
    model, loss_fn, batch = pipeline.train_step.gpt(n_layer=2, batch=8)
    pipeline.train_step.freeze_attention_bias(model)  # Adam amplifies the rounding noise of a zero gradient
    optimizer = slicer.AdamW(0.01, betas=(0.9, 0.99), weight_decay=0.1)
    step, prog = pipeline.pipelined(model, loss_fn, batch, optimizer, split=["blocks.1"], microbatches=4)
    want_losses, want = accumulation.torch_accumulation_steps(model, loss_fn, batch, optimizer, 5, 4)
    trained = [n for n, p in model.named_parameters() if p.requires_grad]
    error = pipeline.train_step.relative_error
    with prog.session(ranks=2) as session:
        losses = [session.step(*batch) for _ in range(3)]
        assert max(error(g, w) for g, w in zip(losses, want_losses)) <= 1e-5, (losses, want_losses)
        saved = session.state_dict()
        assert float(saved["step"]) == 3.0
        session.save(tmp_path / "pipeline")
        timeline, growth = session.timeline()
        assert sorted(stage for stage, _ in timeline) == [0, 1] and len(growth) == 2
        called = {callee.split("_")[0] for _, calls in timeline for callee, *_ in calls}
        assert called == {"forward", "backward", "update"}, called
        prog.timeline = timeline  # each call's CPU seconds replayed through the schedule: a bubble in [0, 1)
        assert all(cpu > 0 for _, calls in timeline for *_, cpu in calls) and 0 <= prog.cpu_bubble() < 1
        data_parallel = slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=st.data_parallel(step, "x"))
        with data_parallel.session() as other:  # the simulator: its devices laid out as data parallel's
            other.load(tmp_path / "pipeline")
            assert other.steps == 3
            loaded = other.state_dict()
            assert set(loaded) == set(saved) and all(np.array_equal(loaded[n], saved[n]) for n in saved)
            assert error(other.step(*batch), want_losses[3]) <= 1e-5
            other.save(tmp_path / "data_parallel")
            moved = other.state_dict()
        session.load(tmp_path / "data_parallel")
        assert session.steps == 4
        back = session.state_dict()
        assert all(np.array_equal(back[n], moved[n]) for n in moved)
        assert error(session.step(*batch), want_losses[4]) <= 1e-5
        final = session.state_dict()
    assert max(error(final[n], want[n]) for n in trained) <= 1e-5
    assert float(final["step"]) == 5.0


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
