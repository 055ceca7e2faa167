"""Vocabulary parallelism on MPI ranks (examples/torch/vocab_parallel.py): a tiny GPT-style language model
(token embedding of 512 words, LM head, cross-entropy) with the vocabulary tiled over 2 and 4 ranks, imported
with slicer.from_torch and as a training step (slicer.training_step, SGD), equal to torch eager on random
tokens; the all_reduce by maximum runs over MPI. And the LLaMA block of examples/torch/llama.py with complex
RoPE (view_as_complex, torch.polar) under Megatron and data parallelism on 2 ranks. (models.py lists the
LLaMA block too: test_torch_models.py runs it on 2 and 4 ranks with the other models.)"""

import sys
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import slicer  # noqa: E402
from example_modules import EXAMPLES, collective_ops, load  # noqa: E402

sys.path.insert(0, str(EXAMPLES / "zoo"))
import zoo_models as zoo  # noqa: E402

vp = load("torch/vocab_parallel.py", "vocab_parallel")
llama = load("torch/llama.py", "llama")


@pytest.mark.parametrize("ranks", [2, 4])
def test_loss_with_the_vocabulary_tiled_equals_torch(ranks):
    model, inputs = vp.tiny_lm(seed=ranks)
    prog = slicer.compile(slicer.from_torch(model, *inputs), mesh=slicer.Mesh(x=ranks),
                          tactics=slicer.parse_tactics(vp.TACTICS))
    assert collective_ops(prog) == ["shard.all_reduce"] * 4
    got = prog.run(*inputs, ranks=ranks, timeout=300)
    np.testing.assert_allclose(got, model(*inputs).detach().numpy(), rtol=1e-5)


@pytest.mark.parametrize("ranks", [2, 4])
def test_training_step_with_the_vocabulary_tiled_equals_torch(ranks):
    model, inputs = vp.tiny_lm(seed=10 + ranks)
    model.train()
    step = slicer.training_step(model, vp.loss_fn, *inputs, optimizer=slicer.SGD(0.1))
    prog = slicer.compile(step, mesh=slicer.Mesh(x=ranks), tactics=slicer.parse_tactics(vp.TACTICS))
    got = dict(zip(step.result_names, prog.run(*inputs, ranks=ranks, timeout=300)))
    loss = model(*inputs)
    loss.backward()
    np.testing.assert_allclose(got["loss"], loss.detach().numpy(), rtol=1e-5)
    for name, param in model.named_parameters():
        np.testing.assert_allclose(got[name], (param - 0.1 * param.grad).detach().numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=name)


@pytest.mark.parametrize("strategy, tactics, axis, expected", [
    ("megatron", llama.MEGATRON, "y", ["shard.all_reduce"] * 2),
    ("data", "x.0=x", "x", []),
])
def test_llama_block_with_complex_rope_equals_torch(strategy, tactics, axis, expected):
    model, inputs = llama.llama_block(seed=7, rope="complex")
    prog = slicer.compile(slicer.from_torch(model, *inputs), mesh=slicer.Mesh(**{axis: 2}),
                          tactics=slicer.parse_tactics(tactics))
    assert collective_ops(prog) == expected
    got = prog.run(*inputs, ranks=2, timeout=300)
    want = model(*inputs).detach().numpy()
    assert np.linalg.norm(got - want) / np.linalg.norm(want) <= 1e-5


@pytest.mark.parametrize("ranks", [2, 4])
def test_gpt2_vocabulary_of_50257_tiled_unevenly_equals_torch(ranks):
    """GPT-2's vocabulary (50257 = 2 * 25128 + 1, a prime) over 2 and 4 ranks: padded blocks of ceil(V/k) rows,
    the lookups masked by the blocks' starts, the logits tiled through the reshape that merges batch and
    sequence (it leaves the vocabulary alone), the maximum skipping the padding; the same collectives as an
    even vocabulary, forward and training step, equal to torch (the last token id and target included)."""
    torch.manual_seed(ranks)
    model = vp.TinyLM(vocab=50257, d_model=8)
    idx, targets = torch.randint(0, 50257, (2, 8)), torch.randint(0, 50257, (2, 8))
    idx[0, 0] = targets[1, 1] = 50256
    mesh, tactics = slicer.Mesh(x=ranks), slicer.parse_tactics(vp.TACTICS)
    forward = slicer.compile(slicer.from_torch(model, idx, targets), mesh=mesh, tactics=tactics)
    assert collective_ops(forward) == ["shard.all_reduce"] * 4
    np.testing.assert_allclose(forward.run(idx, targets, ranks=ranks, timeout=300, oversubscribe=True),
                               model(idx, targets).detach().numpy(), rtol=1e-5)
    step = slicer.training_step(model, vp.loss_fn, idx, targets, optimizer=slicer.SGD(0.1))
    prog = slicer.compile(step, mesh=mesh, tactics=tactics)
    assert "shard.all_gather" not in collective_ops(prog)
    got = dict(zip(step.result_names, prog.run(idx, targets, ranks=ranks, timeout=300, oversubscribe=True)))
    loss = model(idx, targets)
    loss.backward()
    np.testing.assert_allclose(got["loss"], loss.detach().numpy(), rtol=1e-5)
    for name, param in model.named_parameters():
        np.testing.assert_allclose(got[name], (param - 0.1 * param.grad).detach().numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=name)


@pytest.mark.parametrize("ranks", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_tied_embedding_plus_positions_split_by_vocabulary_equals_torch(ranks):
    """nanoGPT's `wte(idx) + wpe(pos)` (elementwise fusion makes it one op reading both tables: the import splits
    the token lookup back out, frontends/lookups.py) with the tied wte/LM head split by vocabulary (61 words:
    padded blocks) under Megatron: the lookup stays a masked lookup (no DegradedStrategy, no gathered table);
    one SGD step equals torch on 2 and 4 ranks."""
    torch.manual_seed(ranks)
    model = zoo.NanoGPT(vocab=61, block_size=8, d=32, n_head=4, n_layer=1)
    idx, targets = torch.randint(0, 61, (4, 8)), torch.randint(0, 61, (4, 8))
    idx[0, 0] = targets[1, 1] = 60
    step = slicer.training_step(model, zoo._lm_loss, idx, targets, optimizer=slicer.SGD(0.1))
    split = {"column": ["transformer.h.*.attn.c_attn.*", "transformer.h.*.mlp.c_fc.*", "transformer.wte.weight"],
             "row": ["transformer.h.*.attn.c_proj.weight", "transformer.h.*.mlp.c_proj.weight"]}
    with warnings.catch_warnings():
        warnings.simplefilter("error", slicer.DegradedStrategy)
        prog = slicer.compile(step, mesh=slicer.Mesh(y=ranks), tactics=slicer.strategies.megatron(step, "y", **split))
    got = dict(zip(step.result_names, prog.run(idx, targets, ranks=ranks, timeout=300, oversubscribe=True)))
    loss = zoo._lm_loss(model, idx, targets)
    loss.backward()
    np.testing.assert_allclose(got["loss"], loss.detach().numpy(), rtol=1e-5)
    for name, param in model.named_parameters():
        np.testing.assert_allclose(got[name], (param - 0.1 * param.grad).detach().numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=name)
