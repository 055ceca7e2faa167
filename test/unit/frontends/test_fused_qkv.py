"""Fused QKV projections written the usual ways partition without degrading, trained equal to torch: nanoGPT's
`q, k, v = c_attn(x).split(D, dim=2)` under Megatron (the backward of the split is a concat, now a stack whose
pieces' dim the heads tile), timm's ViT `qkv.reshape(B, N, 3, H, hd).permute(2, 0, 3, 1, 4).unbind(0)` under
data parallel (unbind's backward, a stack along the batch-major dim, no longer gathers the batch). And a
degraded strategy names the model's line, also for an op of the backward."""

import re
import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

from torch.nn import functional as F  # noqa: E402

import slicer  # noqa: E402
from example_modules import collective_ops, load  # noqa: E402
from slicer import strategies as st  # noqa: E402

train = load("torch/train_step.py", "train_step")
vit = load("torch/vit.py", "vit")
NANOGPT_MEGATRON = {"column": ["*.c_attn.*", "*.c_fc.*"], "row": ["*.c_proj.weight"]}


def _compile_strictly(step, mesh, tactics):
    with warnings.catch_warnings():
        warnings.simplefilter("error", slicer.DegradedStrategy)
        return slicer.compile(step, mesh=mesh, tactics=tactics)


@pytest.mark.slow
def test_nanogpt_split_under_megatron_does_not_degrade_and_trains_equal_to_torch():
    model, loss_fn, batch = train.gpt(n_layer=1, d_model=16, n_head=2, vocab=32)
    train.freeze_attention_bias(model)
    optimizer = slicer.AdamW(0.01)
    step = slicer.training_step(model, loss_fn, *batch, optimizer=optimizer)
    prog = _compile_strictly(step, slicer.Mesh(y=2), st.megatron(step, "y", **NANOGPT_MEGATRON))
    loss_error, param_error = train.compare(model, loss_fn, batch, optimizer, prog, steps=2)
    assert loss_error <= 1e-5 and param_error <= 1e-5


@pytest.mark.slow
def test_vit_unbind_under_data_parallel_gathers_nothing_and_trains_equal_to_torch():
    model, (images,) = vit.tiny_vit(n_layer=1, batch=4, image=8, d_model=16, n_head=2)
    model.train()
    labels = torch.randint(0, 10, (images.shape[0],), generator=torch.Generator().manual_seed(0))

    def loss_fn(model, images, labels):
        return F.cross_entropy(model(images), labels)

    optimizer = slicer.SGD(0.1, momentum=0.9)
    step = slicer.training_step(model, loss_fn, images, labels, optimizer=optimizer)
    prog = _compile_strictly(step, slicer.Mesh(x=2), st.data_parallel(step, "x"))
    assert "shard.all_gather" not in collective_ops(prog)
    loss_error, param_error = train.compare(model, loss_fn, (images, labels), optimizer, prog, steps=2)
    assert loss_error <= 1e-5 and param_error <= 1e-5


@pytest.mark.slow
def test_a_degraded_strategy_names_the_line_of_the_model_also_in_the_backward():
    """3 heads on y=2: the heads do not divide, attention runs whole. Every warning names a line of the model
    (gpt2_block.py), none an op "at unknown": the backward's ops carry the line of the forward op they
    differentiate (the split's concat: the split's line)."""
    model, loss_fn, batch = train.gpt(n_layer=1, d_model=24, n_head=3, vocab=32)
    step = slicer.training_step(model, loss_fn, *batch, optimizer=slicer.SGD(0.1))
    with pytest.warns(slicer.DegradedStrategy) as caught:
        slicer.compile(step, mesh=slicer.Mesh(y=2), tactics=st.megatron(step, "y", **NANOGPT_MEGATRON))
    messages = [str(w.message) for w in caught if issubclass(w.category, slicer.DegradedStrategy)]
    assert messages and not [m for m in messages if "at unknown" in m]
    assert all(re.search(r"at \S*examples/torch/gpt2?(_block)?\.py:\d+", m) for m in messages), messages
