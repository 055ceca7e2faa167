"""Context parallelism by heads (`strategies.context_parallel(..., method="all_to_all")`, DeepSpeed-Ulysses:
frontends/context_heads.py): attention's q, k and v moved from sequence-tiled to head-tiled by one all_to_all
each and its output back, the backward's mirrored all_to_alls, nothing else moved around attention; on
`F.scaled_dot_product_attention` (causal) and on attention written by hand (softmax(q k^T / sqrt(d) + mask) v,
an additive padding mask), training steps and a forward program, on the simulator against torch; heads the axis
does not divide: a CompileError saying what to change; with data parallel on another axis."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import slicer  # noqa: E402
from example_modules import load  # noqa: E402
from slicer import strategies as st  # noqa: E402

idioms = load("torch/idioms.py", "idioms")
by_hand = load("torch/attention_by_hand.py", "attention_by_hand")
HandWritten, lm_loss, tokens = by_hand.HandWritten, by_hand.lm_loss, by_hand.tokens
train = idioms.train_step


def collectives(prog) -> list[str]:
    """The kinds of the collectives `explain()` lists, in order."""
    listed = prog.explain().split("propagation:")[0]
    return [line.split()[1] for line in listed.splitlines() if line.strip()[:1].isdigit() and ". " in line]


def test_causal_step_moves_q_k_v_and_the_output_by_all_to_all_and_trains_like_torch():
    """One causal sequence (F.scaled_dot_product_attention) on x=2: 4 all_to_alls forward (q, k, v to heads,
    the output back), 4 backward (the output's gradient to heads, those of q, k, v back), no gather; the loss's
    and the gradients' all_reduces. A step equal to torch's."""
    torch.manual_seed(0)
    model, batch = idioms.NanoGPT(32, 8, d_model=24, n_head=4, flavors=("causal",)), tokens(1)
    optimizer = slicer.SGD(0.1)
    step = slicer.training_step(model, lm_loss, *batch, optimizer=optimizer)
    prog = slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=st.context_parallel(step, "x", method="all_to_all"))
    kinds = collectives(prog)
    assert kinds.count("shard.all_to_all") == 8 and set(kinds) == {"shard.all_to_all", "shard.all_reduce"}, kinds
    report = prog.explain()  # 4 heads x 4 tokens x 6 features a device: 384 B, half of it received
    assert "to heads (attention's inputs): 4 all_to_alls, 768 B received per device" in report
    assert "back to the sequence (attention's outputs): 4 all_to_alls, 768 B received per device" in report
    loss_error, param_error = train.compare(model, lm_loss, batch, optimizer, prog, steps=1)
    assert loss_error <= 1e-5 and param_error <= 1e-5, (loss_error, param_error)


def test_heads_the_axis_does_not_divide_say_what_to_change():
    torch.manual_seed(0)
    model, batch = idioms.NanoGPT(32, 8, d_model=24, n_head=2, flavors=("causal",)), tokens(1)
    step = slicer.training_step(model, lm_loss, *batch, optimizer=slicer.SGD(0.1))
    with pytest.raises(slicer.CompileError, match="attention has 2 heads, which the 4 devices of x do not divide"):
        slicer.compile(step, mesh=slicer.Mesh(x=4), tactics=st.context_parallel(step, "x", method="all_to_all"))


@pytest.mark.slow
def test_attention_written_by_hand_with_a_padding_mask_on_four_devices():
    """softmax(q k^T / sqrt(d) + mask) v, a fused qkv projection, an additive padding mask [1, 1, 1, S] (tiled
    with the sequence, gathered for the scores: S floats), one sequence on x=4: the same 8 all_to_alls; a
    step equal to torch's."""
    (model, loss_fn, batch), optimizer = by_hand.padded(seed=1), slicer.SGD(0.1)
    step = slicer.training_step(model, loss_fn, *batch, optimizer=optimizer)
    tactics = st.context_parallel(step, "x", method="all_to_all")
    assert tactics[-1] == slicer.Tile(arg="mask", dim=3, axes="x")
    prog = slicer.compile(step, mesh=slicer.Mesh(x=4), tactics=tactics)
    assert collectives(prog).count("shard.all_to_all") == 8
    loss_error, param_error = train.compare(model, loss_fn, batch, optimizer, prog, steps=1)
    assert loss_error <= 1e-5 and param_error <= 1e-5, (loss_error, param_error)


@pytest.mark.parametrize("devices", [2, 4])
def test_a_forward_program_by_heads(devices):
    """`slicer.from_torch` of causal attention written by hand (masked_fill): q, k, v to heads and the output
    back, 4 all_to_alls, the logits equal torch's."""
    torch.manual_seed(2)
    model, (idx, _) = HandWritten(causal=True), tokens(1)
    program = slicer.from_torch(model, idx)
    prog = slicer.compile(program, mesh=slicer.Mesh(x=devices),
                          tactics=st.context_parallel(program, "x", method="all_to_all"))
    kinds = collectives(prog)
    assert kinds.count("shard.all_to_all") == 4 and "shard.all_gather" not in kinds[:4], kinds
    with torch.no_grad():
        np.testing.assert_allclose(prog.run(idx), model(idx).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_with_data_parallel_on_another_axis():
    """Batch 2 over x=2, the sequence over c=2: attention keeps the batch tiled over x and moves by the same 8
    all_to_alls over c (the loss's flatten of [B, S] still gathers its logits: docs/tactics.md, "Sequence
    tiling"); a step equal to torch's."""
    torch.manual_seed(0)
    model, batch = idioms.NanoGPT(32, 8, d_model=24, n_head=4, flavors=("causal",)), tokens(2)
    optimizer = slicer.SGD(0.1)
    step = slicer.training_step(model, lm_loss, *batch, optimizer=optimizer)
    tactics = st.data_parallel(step, "x") + st.context_parallel(step, "c", method="all_to_all")
    with pytest.warns(slicer.DegradedStrategy, match="collapse_shape"):
        prog = slicer.compile(step, mesh=slicer.Mesh(x=2, c=2), tactics=tactics)
    listed = prog.explain().split("propagation:")[0]
    assert listed.count("shard.all_to_all over [c]") == 8 and "all_to_all over [x]" not in listed
    loss_error, param_error = train.compare(model, lm_loss, batch, optimizer, prog, steps=1)
    assert loss_error <= 1e-5 and param_error <= 1e-5, (loss_error, param_error)
