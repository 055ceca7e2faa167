"""Training steps of models written the usual way (examples/torch/idioms.py) on 2 MPI ranks: a nanoGPT with
`F.scaled_dot_product_attention` (causal, scale=, grouped-query attention both ways) under data parallel and
Megatron (q, k, v and fc1 by heads and hidden units), one under context parallelism (ring attention), and a
Mixtral-style top-2 mixture of experts (topk, one_hot, einsum over stacked expert weights, a load-balancing
loss) under data parallel and with its experts split over the ranks (Megatron's column split of the stacked
weights). 5 AdamW steps in a session, equal to torch
eager (torch.optim, foreach=False) within 1e-5, no strategy degraded. (On the simulator, every idiom:
test/unit/frontends/test_training_idioms.py.)"""

import functools
import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import slicer  # noqa: E402
from example_modules import collective_ops, load  # noqa: E402
from slicer import strategies as st  # noqa: E402

idioms = load("torch/idioms.py", "idioms")
train = idioms.train_step
ADAMW = slicer.AdamW(0.01, betas=(0.9, 0.99), weight_decay=0.1)
EXPERTS = {"column": ["moe.w1", "moe.w3", "moe.w2"]}  # the stacked weights [E, ...] split by expert


@functools.cache
def imported(model_name: str):
    model, loss_fn, batch = idioms.nano_gpt("causal") if model_name == "gpt" else idioms.mixtral_moe("one_hot")
    return model, loss_fn, batch, slicer.training_step(model, loss_fn, *batch, optimizer=ADAMW)


CASES = [("gpt", "data"), ("moe", "experts")]
"""nanoGPT with SDPA under Megatron and the top-2 MoE's one-hot router under Megatron train in test_zoo.py."""


@pytest.mark.parametrize("model_name, strategy", CASES, ids=[f"{m}-{s}" for m, s in CASES])
@pytest.mark.slow
def test_idiomatic_models_train_like_torch_on_two_ranks(model_name, strategy):
    model, loss_fn, batch, step = imported(model_name)
    if strategy == "data":
        mesh, tactics = {"x": 2}, st.data_parallel(step, "x")
    else:
        mesh, tactics = {"y": 2}, st.megatron(step, "y", **(idioms.MEGATRON if model_name == "gpt" else EXPERTS))
    with warnings.catch_warnings():
        warnings.simplefilter("error", slicer.DegradedStrategy)
        prog = slicer.compile(step, mesh=slicer.Mesh(**mesh), tactics=tactics)
    assert any(c.startswith("shard.all_reduce") for c in collective_ops(prog))  # the split is real
    loss_error, param_error = train.compare(model, loss_fn, batch, ADAMW, prog, ranks=2)
    assert loss_error <= 1e-5 and param_error <= 1e-5, (loss_error, param_error)


@pytest.mark.slow
def test_context_parallel_trains_like_torch_on_two_ranks():
    """Ring attention (`strategies.context_parallel`) on 2 ranks: a one-block causal nanoGPT, two sequences, its
    keys and values moved by permutes, load-balanced (the batch enters a session in zig-zag order), the rows of
    the batch merged sequence-major (nothing gathered); AdamW steps equal torch's."""
    torch.manual_seed(0)
    model = idioms.NanoGPT(32, 8, flavors=("causal",))
    tokens = torch.randint(0, 32, (2, 9))
    batch = (tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous())

    def loss_fn(m, idx, targets):
        return torch.nn.functional.cross_entropy(m(idx).flatten(0, 1), targets.flatten())

    step = slicer.training_step(model, loss_fn, *batch, optimizer=ADAMW)
    with warnings.catch_warnings():
        warnings.simplefilter("error", slicer.DegradedStrategy)
        prog = slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=st.context_parallel(step, "x"))
    ops = collective_ops(prog)
    assert any(c.startswith("slicer.permute") for c in ops) and not any(c.startswith("shard.all_gather") for c in ops)
    assert prog.imported.input_order
    loss_error, param_error = train.compare(model, loss_fn, batch, ADAMW, prog, ranks=2)
    assert loss_error <= 1e-5 and param_error <= 1e-5, (loss_error, param_error)
