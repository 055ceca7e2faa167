"""PyTorch idioms as models are written (examples/torch/idioms.py) imported forward (`slicer.from_torch`) and as
training steps (`slicer.training_step` with AdamW), partitioned data-parallel on the simulator, equal to torch:
`F.scaled_dot_product_attention` (causal, boolean and additive masks, scale=, grouped-query attention both ways),
a Mixtral-style top-2 mixture of experts (topk, one_hot, scatter, gather, einsum over stacked expert weights
with silu, a load-balancing loss), and indexed reads and writes (index_select, index_add, scatter_add, gather).
Their decompositions against the aten ops: test_decomp_idioms.py; on 2 MPI ranks under data parallel and
Megatron: test/mpi/test_training_idioms_mpi.py."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import slicer  # noqa: E402
from example_modules import load  # noqa: E402
from slicer import strategies as st  # noqa: E402

pytestmark = pytest.mark.filterwarnings("error::slicer.DegradedStrategy")  # data parallel, undegraded

idioms = load("torch/idioms.py", "idioms")
train = idioms.train_step
ADAMW = slicer.AdamW(0.01, betas=(0.9, 0.99), weight_decay=0.1)
STEPS = 3


def data_parallel(program):
    return slicer.compile(program, mesh=slicer.Mesh(x=2), tactics=st.data_parallel(program, "x"))


def assert_imports_and_trains(model, loss_fn, batch, forward_inputs=None):
    """The forward of `model` on `forward_inputs` (if given) and 3 AdamW steps of `loss_fn` on `batch`, both
    data-parallel on the simulator, equal torch's (1e-5 relative)."""
    if forward_inputs is not None:
        program = slicer.from_torch(model, *forward_inputs)
        got = data_parallel(program).run(*forward_inputs)
        with torch.no_grad():
            want = model(*forward_inputs)
        got, want = (got, want) if isinstance(want, tuple) else ([got], [want])
        assert all(train.relative_error(g, w.numpy()) <= 1e-5 for g, w in zip(got, want))
    step = slicer.training_step(model, loss_fn, *batch, optimizer=ADAMW)
    assert "tm_tensor" not in step.text and "flash_attention" not in step.text
    loss_error, param_error = train.compare(model, loss_fn, batch, ADAMW, data_parallel(step), steps=STEPS)
    assert loss_error <= 1e-5 and param_error <= 1e-5, (loss_error, param_error)


@pytest.mark.parametrize("kind", list(idioms.ATTENTION))
@pytest.mark.slow
def test_scaled_dot_product_attention_imports_and_trains_like_torch(kind):
    """One block per way of writing attention: causal, scale=, GQA (enable_gqa, repeat_interleave); a boolean
    padding mask, an additive one."""
    model, loss_fn, batch = idioms.nano_gpt(kind)
    inputs = batch[:1] + batch[2:]  # idx, and the mask where the model takes one
    assert_imports_and_trains(model, loss_fn, batch, inputs)


@pytest.mark.parametrize("router", idioms.ROUTERS)
@pytest.mark.slow
def test_top2_mixture_of_experts_imports_and_trains_like_torch(router):
    """Forward (the output and the load-balancing loss) and steps with the one-hot router; steps with the
    router that gathers and scatters (the forward imports through the same decompositions)."""
    model, loss_fn, batch = idioms.mixtral_moe(router)
    assert_imports_and_trains(model, loss_fn, batch, batch[:1] if router == "one_hot" else None)


class Indexing(torch.nn.Module):
    """A table read with index_select, rows added with index_add, a bucketed sum with scatter_add, and values
    read back with gather: each with a gradient."""

    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(6, 4))
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, rows, buckets):
        picked = self.proj(torch.index_select(self.table, 0, rows))  # [R, 4]
        added = torch.zeros(6, 4).index_add(0, rows, picked, alpha=0.5)  # [6, 4]
        summed = torch.zeros(5, 4).scatter_add(0, buckets, torch.tanh(added[:, :] @ self.proj.weight)[:4])
        return torch.gather(summed, 1, buckets[:, :2] % 4) * 2 + added[:4, :2]


@pytest.mark.slow
def test_indexed_reads_and_writes_import_and_train_like_torch():
    torch.manual_seed(0)
    model = Indexing()
    rows, buckets = torch.tensor([3, 0, 3, 5, 1]), torch.randint(0, 5, (4, 4))
    target = torch.randn(4, 2)

    def loss_fn(model, rows, buckets, target):
        return torch.nn.functional.mse_loss(model(rows, buckets), target)

    program = slicer.from_torch(model, rows, buckets)
    got = slicer.compile(program, mesh=slicer.Mesh(x=2), tactics=[]).run(rows, buckets)  # indices whole
    with torch.no_grad():
        assert train.relative_error(got, model(rows, buckets).numpy()) <= 1e-5
    step = slicer.training_step(model, loss_fn, rows, buckets, target, optimizer=ADAMW)
    assert "tm_tensor" not in step.text
    prog = slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=[])
    loss_error, param_error = train.compare(model, loss_fn, (rows, buckets, target), ADAMW, prog, steps=STEPS)
    assert loss_error <= 1e-5 and param_error <= 1e-5, (loss_error, param_error)


class BatchedExperts(torch.nn.Module):
    """Activations of batched matmuls over stacked expert weights: silu of an einsum, gelu of a bmm. Their
    gradients squeeze the einsum's unit dims (prims.squeeze, once refused by functionalization: decomp_prims.py)
    and AdamW's lerp copies into the gradient's strides (prims.copy_strided)."""

    def __init__(self, experts: int = 3, d: int = 8, h: int = 6):
        super().__init__()
        self.w1 = torch.nn.Parameter(torch.randn(experts, d, h) * d ** -0.5)
        self.w2 = torch.nn.Parameter(torch.randn(experts, h, d) * h ** -0.5)

    def forward(self, x):  # x: [E, C, D], the tokens dispatched to each expert
        hidden = torch.nn.functional.silu(torch.einsum("ecd,edh->ech", x, self.w1))
        return torch.nn.functional.gelu(torch.bmm(hidden, self.w2))


@pytest.mark.slow
def test_activations_of_batched_expert_matmuls_train_like_torch():
    torch.manual_seed(0)
    model, x = BatchedExperts(experts=4), torch.randn(4, 2, 8)

    def loss_fn(model, x):
        return model(x).square().mean()

    assert_imports_and_trains(model, loss_fn, (x,), (x,))
