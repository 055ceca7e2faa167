"""Vocabulary parallelism on the simulator (examples/torch/vocab_parallel.py): an embedding tiled over the
vocabulary is a masked lookup per device and one all_reduce; the LM head's logits stay tiled through the
cross-entropy (an all_reduce by maximum and two sums, each of a [B*S] value), forward and training step; no
collective carries the logits. Complex RoPE (examples/torch/llama.py) under Megatron keeps the heads split.
Every result equals torch eager."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

from mlir import ir  # noqa: E402

import slicer  # noqa: E402
from example_modules import load  # noqa: E402
from slicer.dialect import make_context  # noqa: E402
from slicer.spmd import report  # noqa: E402

vp = load("torch/vocab_parallel.py", "vocab_parallel")
LOGITS = vp.BATCH * vp.SEQ * vp.VOCAB


def collectives(prog):
    with make_context():
        return report(ir.Module.parse(prog.spmd)).collectives


def biggest(found) -> int:
    """The most elements any collective moves (its larger local block, before or after)."""
    return max(max(math.prod(c.local_before), math.prod(c.local_after)) for c in found)


@pytest.mark.parametrize("devices", [2, 4])
def test_embedding_over_the_vocabulary_is_a_masked_lookup_and_one_all_reduce(devices):
    model, (idx, _) = vp.tiny_lm(seed=1)
    program = slicer.from_torch(model.wte, idx)
    prog = slicer.compile(program, mesh=slicer.Mesh(x=devices), tactics=slicer.parse_tactics("weight.0=x"))
    found = collectives(prog)
    assert [(c.op, c.mesh_axes, c.local_before) for c in found] == [("shard.all_reduce", ("x",), (2, 8, 32))]
    assert "f32[512, 32] as [[x],[]]" in prog.explain()
    np.testing.assert_array_equal(prog.run(idx), model.wte(idx).detach().numpy())  # one term per sum: exact


@pytest.mark.parametrize("tactics, local", [("input.0=x", (1, 8)), ("input.1=x", (2, 4)), ("weight.1=x", (512, 16))])
def test_batch_sequence_and_embedding_dims_need_no_collective(tactics, local):
    model, (idx, _) = vp.tiny_lm(seed=2)
    program = slicer.from_torch(model.wte, idx)
    prog = slicer.compile(program, mesh=slicer.Mesh(x=2), tactics=slicer.parse_tactics(tactics))
    assert collectives(prog) == []
    assert f"(local [{', '.join(map(str, local))}])" in prog.explain()
    np.testing.assert_array_equal(prog.run(idx), model.wte(idx).detach().numpy())


@pytest.mark.parametrize("devices", [2, 4])
@pytest.mark.slow
def test_cross_entropy_keeps_the_logits_tiled(devices):
    model, inputs = vp.tiny_lm(seed=3)
    prog = slicer.compile(slicer.from_torch(model, *inputs), mesh=slicer.Mesh(x=devices),
                          tactics=slicer.parse_tactics(vp.TACTICS))
    found = collectives(prog)
    rows = vp.BATCH * vp.SEQ
    assert [(c.op, c.local_before) for c in found] == [("shard.all_reduce", (2, 8, 32))] + \
        [("shard.all_reduce", (rows,))] * 3  # the embedding; max, sum of exponentials, the target's logit
    assert biggest(found) < LOGITS // devices
    assert "reduction =  max" in prog.spmd or "reduction = max" in prog.spmd
    want = model(*inputs).detach().numpy()
    np.testing.assert_allclose(prog.run(*inputs), want, rtol=1e-5)


@pytest.mark.slow
def test_training_step_keeps_the_logits_tiled():
    """The step's backward: d(logits) stays tiled too; the gradient of h is one all_reduce of [B, S, D], the
    gradients of both tables stay tiled over the vocabulary."""
    model, inputs = vp.tiny_lm(seed=4)
    model.train()
    step = slicer.training_step(model, vp.loss_fn, *inputs, optimizer=slicer.SGD(0.1))
    prog = slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=slicer.parse_tactics(vp.TACTICS))
    found = collectives(prog)
    assert {c.op for c in found} == {"shard.all_reduce"} and len(found) == 5
    assert biggest(found) == vp.BATCH * vp.SEQ * vp.D_MODEL
    got = dict(zip(step.result_names, prog.run(*inputs)))
    loss = model(*inputs)
    loss.backward()
    np.testing.assert_allclose(got["loss"], loss.detach().numpy(), rtol=1e-5)
    for name, param in model.named_parameters():
        want = (param - 0.1 * param.grad).detach().numpy()
        np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.slow
def test_complex_rope_under_megatron_keeps_the_heads_split():
    llama = load("torch/llama.py", "llama")
    model, inputs = llama.llama_block(seed=5, rope="complex")
    prog = slicer.compile(slicer.from_torch(model, *inputs), mesh=slicer.Mesh(y=2),
                          tactics=slicer.parse_tactics(llama.MEGATRON))
    assert [c.op for c in collectives(prog)] == ["shard.all_reduce"] * 2
    assert "local [32, 64]" in prog.explain().split("attention.wq.weight")[1].splitlines()[0]  # half the heads
    want = model(*inputs).detach().numpy()
    np.testing.assert_allclose(prog.run(*inputs), want, rtol=1e-5, atol=1e-6)
