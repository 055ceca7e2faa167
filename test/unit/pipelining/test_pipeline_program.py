"""A GPT's training step compiled under `strategies.pipeline` (2 stages of 2 chunks, interleaved 1F1B) and
trained in this process (every stage's programs on the simulator, the transfers in memory): 3 SGD-with-momentum
steps equal torch's accumulation loop over the same micro-batches (losses and every parameter within 1e-5);
`explain()` shows each stage's order, the bubble and the activations held; the pipelined module carries the
transfers as `slicer.send` / `slicer.recv`. With remat in each stage (GPipe and `full`, 1F1B and `save_dots`)
the same, holding fewer activations. A pipeline that does not fit its mesh or step is refused. (1F1B on 2 MPI
ranks with AdamW, and with data parallel on 4: test/mpi/test_pipeline_mpi.py.)"""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import numpy as np  # noqa: E402

import slicer  # noqa: E402
from example_modules import load  # noqa: E402
from slicer import strategies as st  # noqa: E402
from slicer.core.errors import CompileError, InvalidTactic  # noqa: E402
from slicer.tactics.pipeline_tactic import Pipeline  # noqa: E402

pipeline = load("torch/pipeline.py", "pipeline")
train_step = pipeline.train_step


@pytest.mark.slow
def test_interleaved_steps_in_process_equal_torch(tmp_path):
    """2 stages of 2 model chunks each (virtual stages 0, 2 on stage 0 and 1, 3 on stage 1)."""
    model, loss_fn, batch = train_step.gpt(n_layer=3, batch=4)
    optimizer = slicer.SGD(0.1, momentum=0.9)
    _, prog = pipeline.pipelined(model, loss_fn, batch, optimizer, split=["blocks.0", "blocks.1", "blocks.2"],
                                 microbatches=2, schedule="interleaved", virtual_stages=2)
    text = prog.explain()
    assert "stage 0: F0 F1 F0.1 F1.1 B0.1 B1.1 B0 B1" in text and "bubble: 0.200" in text
    assert prog.text.count('"slicer.send"') == prog.text.count('"slicer.recv"') == 12  # 3 cuts x 2 x 2
    assert [m["stage"] for m in prog.memory()] == [0, 1]
    loss_error, state_error, got = pipeline.compare(model, loss_fn, batch, optimizer, prog, 2)
    assert loss_error <= 1e-5 and state_error <= 1e-5, (loss_error, state_error)
    assert "momentum.blocks.1.mlp.c_fc.weight" in got
    with prog.session() as session:  # a checkpoint of stages holding two model chunks each, loaded back
        session.step(*batch)
        session.save(tmp_path)
        saved = session.state_dict()
    with prog.session() as session:
        session.load(tmp_path)
        loaded = session.state_dict()
        session.step(*batch, lr=0.0)  # this step's learning rate: the parameters stay, the momentum moves
        still = session.state_dict()
    assert session.steps == 2 and set(loaded) == set(got) and all(np.array_equal(loaded[n], saved[n]) for n in saved)
    weight = "blocks.1.mlp.c_fc.weight"
    assert np.array_equal(still[weight], saved[weight])
    assert not np.array_equal(still[f"momentum.{weight}"], saved[f"momentum.{weight}"])


def test_pipeline_tactics_are_checked_before_importing():
    with pytest.raises(InvalidTactic, match="split= or stages|split=\\[module names"):
        Pipeline("p", 4)
    with pytest.raises(InvalidTactic, match="interleaved"):
        Pipeline("p", 4, ("blocks.1",), schedule="1f1b", virtual_stages=2)
    assert str(Pipeline("p", 8, ("blocks.4", "blocks.8"))) == \
        "pipeline(axis=p, split=[blocks.4, blocks.8], microbatches=8, schedule=1f1b)"


def test_a_pipeline_needs_an_imported_training_step():
    with pytest.raises(InvalidTactic, match="slicer.training_step"):
        st.pipeline("func.func @f() { return }", "p", split=["a"], microbatches=2)


def test_a_pipelined_module_is_not_compiled_from_its_text():
    """`prog.text` of a pipeline (what slicer-run would be given) only declares its stages' programs: refused,
    saying how to run it."""
    text = """func.func private @forward_0(tensor<2xf32>) -> tensor<2xf32>
    func.func @stage_0(%x: tensor<2xf32>) -> tensor<2xf32> attributes {slicer.stage = 0 : i64} {
      %0 = func.call @forward_0(%x) : (tensor<2xf32>) -> tensor<2xf32>
      return %0 : tensor<2xf32>
    }"""
    with pytest.raises(CompileError, match="pipelined step's module.*prog.session"):
        slicer.compile(text, mesh=slicer.Mesh(p=2), entry="stage_0")


@pytest.mark.slow
def test_split_points_must_match_the_axis_and_remat_a_module():
    model, loss_fn, batch = train_step.gpt(n_layer=2, batch=4)
    step = slicer.training_step(model, loss_fn, *batch, optimizer=slicer.SGD(0.1))
    tactics = st.pipeline(step, "p", split=["blocks.1"], microbatches=2)
    with pytest.raises(CompileError, match="give 3 split points"):
        slicer.compile(step, mesh=slicer.Mesh(p=4), tactics=tactics)
    with pytest.raises(CompileError, match="unknown mesh axis 'p'"):
        slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=tactics)
    remat = [slicer.Remat(pattern="decoder.*")]  # before the stages are imported
    with pytest.raises(InvalidTactic, match="pipeline: the pattern 'decoder.\\*' matches no module"):
        slicer.compile(step, mesh=slicer.Mesh(p=2), tactics=st.pipeline(step, "p", split=["blocks.1"],
                                                                         microbatches=2) + remat)


@pytest.fixture(scope="module")
def remat_gpt():
    """A 2-block GPT, SGD with momentum, and its 2-stage pipeline without remat (GPipe, 2 micro-batches)."""
    model, loss_fn, batch = train_step.gpt(n_layer=2, batch=4)
    optimizer = slicer.SGD(0.1, momentum=0.9)
    _, plain = pipeline.pipelined(model, loss_fn, batch, optimizer, split=["blocks.1"], microbatches=2,
                                  schedule="gpipe")
    return model, loss_fn, batch, optimizer, plain


@pytest.mark.slow
@pytest.mark.parametrize("schedule, policy", [("gpipe", "full"), ("1f1b", "save_dots")])
def test_remat_in_each_stage_equals_torch_and_holds_less(remat_gpt, schedule, policy):
    """Remat on every block of each stage: each stage's forward saves only what the policy keeps (full: each
    block's input; save_dots: the linear layers' results too), its backward recomputes the rest; 3 steps equal
    torch's, and each stage holds fewer activations per micro-batch than without remat (`held_bytes`, what
    the memory report multiplies by the micro-batches in flight)."""
    model, loss_fn, batch, optimizer, plain = remat_gpt
    _, prog = pipeline.pipelined(model, loss_fn, batch, optimizer, split=["blocks.1"], microbatches=2,
                                 schedule=schedule, strategy=lambda step: st.remat(step, "blocks.*", policy))
    assert [[u.name for u in s.remat] for s in prog.stage_programs] == [["blocks.0"], ["blocks.1"]]
    assert f"virtual stage 1: remat {policy} on blocks.1:" in prog.explain()
    bound = 0.3 if policy == "full" else 0.75  # 0.06 and 0.24 (the last stage holds the head's too); 0.53, 0.62
    assert all(got < bound * want for got, want in zip(prog.held_bytes(), plain.held_bytes(), strict=True)), \
        (prog.held_bytes(), plain.held_bytes())
    assert all(figures["recomputed"] > 0 for figures in prog.memory())
    loss_error, state_error, _ = pipeline.compare(model, loss_fn, batch, optimizer, prog, 2)
    assert loss_error <= 1e-5 and state_error <= 1e-5, (loss_error, state_error)


@pytest.mark.slow
def test_remat_with_megatron_in_each_stage_equals_torch(remat_gpt):
    """Pipeline over p, Megatron's MLPs over x, remat `full` on every block (in process, 4 devices): the stage
    programs are partitioned after the cut, so each stage's backward recomputes its share of the blocks."""
    model, loss_fn, batch, optimizer, plain = remat_gpt
    mlp = {"column": ["blocks.*.mlp.c_fc.*"], "row": ["blocks.*.mlp.c_proj.weight"]}
    _, prog = pipeline.pipelined(model, loss_fn, batch, optimizer, split=["blocks.1"], microbatches=2,
                                 schedule="gpipe", mesh=slicer.Mesh(p=2, x=2),
                                 strategy=lambda step: st.megatron(step, "x", **mlp) + st.remat(step, "blocks.*"))
    assert all(got < 0.5 * want for got, want in zip(prog.held_bytes(), plain.held_bytes(), strict=True))
    loss_error, state_error, _ = pipeline.compare(model, loss_fn, batch, optimizer, prog, 2)
    assert loss_error <= 1e-5 and state_error <= 1e-5, (loss_error, state_error)
