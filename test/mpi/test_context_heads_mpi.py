"""Context parallelism by heads (`strategies.context_parallel(..., method="all_to_all")`, DeepSpeed-Ulysses) on
MPI ranks: a causal nanoGPT (`F.scaled_dot_product_attention`) on 2 ranks and attention written by hand
(softmax(q k^T / sqrt(d) + mask) v with an additive padding mask) on 4, each one sequence; q, k, v and the
output move by all_to_all only (nothing gathered around attention) and AdamW steps equal torch's within 1e-5.
(On the simulator, forward programs and data parallel on another axis too: test_context_heads.py in
test/unit/frontends.)"""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import slicer  # noqa: E402
from example_modules import collective_ops, load  # noqa: E402
from slicer import strategies as st  # noqa: E402

idioms = load("torch/idioms.py", "idioms")
by_hand = load("torch/attention_by_hand.py", "attention_by_hand")
train = idioms.train_step
ADAMW = slicer.AdamW(0.01, betas=(0.9, 0.99), weight_decay=0.1)
F = torch.nn.functional


def sdpa_causal(seed: int):
    torch.manual_seed(seed)
    model = idioms.NanoGPT(32, 8, d_model=24, n_head=4, flavors=("causal",))
    data = torch.randint(0, 32, (1, 9))

    def loss_fn(m, idx, targets):
        return F.cross_entropy(m(idx).flatten(0, 1), targets.flatten())

    return model, loss_fn, (data[:, :-1].contiguous(), data[:, 1:].contiguous())


@pytest.mark.slow
@pytest.mark.parametrize("ranks, make", [(2, sdpa_causal), (4, by_hand.padded)], ids=["sdpa-causal-2", "by-hand-4"])
def test_ulysses_trains_like_torch(ranks, make):
    model, loss_fn, batch = make(0)
    step = slicer.training_step(model, loss_fn, *batch, optimizer=ADAMW)
    prog = slicer.compile(step, mesh=slicer.Mesh(x=ranks), tactics=st.context_parallel(step, "x", method="all_to_all"))
    ops = collective_ops(prog)
    assert sum(c.startswith("shard.all_to_all") for c in ops) == 8, ops
    loss_error, param_error = train.compare(model, loss_fn, batch, ADAMW, prog, steps=3, ranks=ranks)
    assert loss_error <= 1e-5 and param_error <= 1e-5, (loss_error, param_error)
