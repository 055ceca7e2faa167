"""Context parallelism (`strategies.context_parallel`, ring attention: frontends/decomp_ring.py): the ring form
against torch's `F.scaled_dot_product_attention` (output and gradients; causal, boolean and additive padding
masks, 1 to 4 blocks), the strategy's tactics, and a nanoGPT training step under it on the simulator equal to
torch, its keys and values moved by permutes only (no gather); and the positions of a batch of one sequence read at
each block's own index (the batch-1 rule of rules/gathers.py)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import slicer  # noqa: E402
from example_modules import load  # noqa: E402
from slicer import strategies as st  # noqa: E402
from slicer.frontends.composites import attention_in_blocks, decomposed_composites  # noqa: E402
from slicer.frontends.context_import import import_in_blocks  # noqa: E402
from slicer.frontends.decomp_ring import ring_attention  # noqa: E402
from slicer.frontends.decomp_zigzag import zigzag_attention, zigzag_order  # noqa: E402
from slicer.tactics.context_tactic import ContextParallel  # noqa: E402

idioms = load("torch/idioms.py", "idioms")
train = idioms.train_step
F = torch.nn.functional


@pytest.mark.parametrize("blocks", [1, 2, 3, 4])
@pytest.mark.parametrize("mask", [None, "causal", "bool", "additive"])
def test_ring_attention_equals_scaled_dot_product_attention(blocks, mask):
    """Output and gradients of q, k, v in f64 (the running maximum and sum are f32: 1e-5)."""
    torch.manual_seed(blocks)
    q, k, v = (torch.randn(2, 3, 12, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    attn_mask = None
    if mask in ("bool", "additive"):
        attn_mask = torch.ones(2, 1, 1, 12, dtype=torch.bool)
        attn_mask[1, ..., -5:] = False  # the last 5 keys of the second sequence are padding
        if mask == "additive":
            attn_mask = (~attn_mask).double() * -10000.0
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=mask == "causal")
    got = ring_attention(blocks, q, k, v, attn_mask=attn_mask, is_causal=mask == "causal")
    grad = torch.randn_like(want)
    for g, w in zip(torch.autograd.grad(got, (q, k, v), grad), torch.autograd.grad(want, (q, k, v), grad)):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-5)


def test_zigzag_order_gives_each_block_an_early_and_a_late_chunk():
    np.testing.assert_array_equal(zigzag_order(8, 2), [0, 1, 6, 7, 2, 3, 4, 5])
    np.testing.assert_array_equal(zigzag_order(12, 3), [0, 1, 10, 11, 2, 3, 8, 9, 4, 5, 6, 7])
    with decomposed_composites(torch), attention_in_blocks(2, 8):  # the positions a balanced step makes
        np.testing.assert_array_equal(torch.arange(0, 8).numpy(), zigzag_order(8, 2))
        np.testing.assert_array_equal(torch.arange(7).numpy(), np.arange(7))  # another range: as it is


def attention_flops(function, *args) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        out = function(*args)
        out.backward(torch.ones_like(out))
    return counter.get_total_flops()


@pytest.mark.parametrize("blocks", [2, 3, 4])
def test_zigzag_attention_equals_causal_attention_and_skips_the_masked_blocks(blocks):
    """On a sequence in zig-zag order: output and gradients equal causal `F.scaled_dot_product_attention`'s (f64,
    1e-5: the running sums are f32); forward and backward compute (2n + 1) / 4n of the plain ring's products
    (3 [c, c] products at step 0 and 2 after it, of 4 a step: the masked ones are not computed)."""
    torch.manual_seed(blocks)
    q, k, v = (torch.randn(2, 3, 4 * blocks, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    order = torch.from_numpy(zigzag_order(4 * blocks, blocks))
    got = zigzag_attention(blocks, q[:, :, order], k[:, :, order], v[:, :, order], 0.5)
    grad = torch.randn_like(want)
    for g, w in zip(torch.autograd.grad(got, (q, k, v), grad[:, :, order]), torch.autograd.grad(want, (q, k, v), grad)):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got.detach().numpy(), want[:, :, order].detach().numpy(), rtol=1e-5, atol=1e-5)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    balanced = attention_flops(lambda *a: zigzag_attention(blocks, *a, 0.5), *leaves)
    plain = attention_flops(lambda *a: ring_attention(blocks, *a, is_causal=True), *leaves)
    assert balanced * 4 * blocks == plain * (2 * blocks + 1), (balanced, plain)


def test_ring_attention_leaves_other_forms_to_the_plain_math():
    q = torch.randn(1, 2, 8, 4)
    assert ring_attention(2, q, q, q, dropout_p=0.1) is NotImplemented
    assert ring_attention(3, q, q, q) is NotImplemented  # 3 blocks do not divide 8
    assert ring_attention(2, q, q, q, attn_mask=torch.ones(8, 8, dtype=torch.bool)) is NotImplemented  # per query


def one_block_gpt(flavor: str, batch: int, seq: int = 8):
    """A one-block `NanoGPT` attending as `flavor` (idioms.ATTENTION), with its loss and a batch."""
    torch.manual_seed(0)
    model = idioms.NanoGPT(32, seq, flavors=(flavor,))
    tokens = torch.randint(0, 32, (batch, seq + 1))
    idx, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    if flavor != "bool_mask":
        return model, lambda m, idx, targets: F.cross_entropy(m(idx).flatten(0, 1), targets.flatten()), (idx, targets)
    mask = torch.ones(batch, 1, 1, 8, dtype=torch.bool)
    mask[1::2, ..., -2:] = False

    def masked(m, idx, targets, mask):
        return F.cross_entropy(m(idx, mask).flatten(0, 1), targets.flatten())

    return model, masked, (idx, targets, mask)


@pytest.mark.slow
def test_context_parallel_tactics():
    model, loss_fn, batch = one_block_gpt("bool_mask", 2)
    step = slicer.training_step(model, loss_fn, *batch, optimizer=slicer.SGD(0.1))
    assert st.context_parallel(step, "x") == [ContextParallel(("x",)), slicer.Tile(arg="idx", dim=1, axes="x"),
                                              slicer.Tile(arg="targets", dim=1, axes="x"),
                                              slicer.Tile(arg="mask", dim=3, axes="x")]
    assert st.context_parallel(step, "x", method="all_to_all")[0] == ContextParallel(("x",), "all_to_all")
    with pytest.raises(slicer.InvalidTactic, match="method='zigzag' is not supported; one of ring, all_to_all"):
        st.context_parallel(step, "x", method="zigzag")
    forward = slicer.from_torch(model, batch[0], batch[2])
    with pytest.raises(slicer.InvalidTactic, match="training step"):
        st.context_parallel(forward, "x")


def held_across_collectives(graph, which) -> list[str]:
    """The values `which` selects that a kernel makes before a collective and a node reads after it."""
    last, born, found = graph.last_uses(), {}, []
    for index, node in enumerate(graph.nodes):
        for name in getattr(node, "outputs", ()):
            born[name] = index
    for index, node in enumerate(graph.nodes):
        if not hasattr(node, "outputs"):
            found += [n for n, b in born.items() if b < index < last.get(n, -1) and which(graph.values[n])]
    return sorted(set(found))


@pytest.mark.slow
@pytest.mark.filterwarnings("error::slicer.DegradedStrategy")
def test_causal_step_on_two_devices_equals_torch():
    """A sequence of one batch row: every op between the ring's permutes computes on its own tokens (no gather,
    no DegradedStrategy), and no [c, c] block of scores (c = 8 tokens a device; a head has 4 features) is held
    across a collective: the accumulators' zero fill is made per block where it is read (frontends/fills.py),
    the next step's scores after the permutes they do not feed, the query gradient's `dscores @ k` before them
    (lowering/sinking.py). Two SGD steps equal torch's."""
    model, loss_fn, batch = one_block_gpt("causal", 1, seq=16)
    optimizer = slicer.SGD(0.1, momentum=0.9)
    step = slicer.training_step(model, loss_fn, *batch, optimizer=optimizer)
    prog = slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=st.context_parallel(step, "x"))
    collectives = prog.explain().split("propagation:")[0]
    assert "slicer.permute" in collectives and "all_gather" not in collectives
    # k and v once (the backward recomputes the same rotation: one op), dk and dv twice (a step, then home)
    assert collectives.count("slicer.permute over") == 2 + 4
    # load-balanced: the tokens and targets enter in zig-zag order (device 0: chunks 0 and 3 of 4)
    assert [(i, d, o.tolist()) for i, d, o in prog.imported.input_order] == [
        (i, 1, [0, 1, 2, 3, 12, 13, 14, 15, 4, 5, 6, 7, 8, 9, 10, 11]) for i in (0, 1)]
    assert not held_across_collectives(prog.graph, lambda v: v.local_shape[-2:] == (8, 8) and v.dtype == "f32")
    loss_error, param_error = train.compare(model, loss_fn, batch, optimizer, prog, steps=2)
    assert loss_error <= 1e-5 and param_error <= 1e-5, (loss_error, param_error)


@pytest.mark.slow
@pytest.mark.filterwarnings("error::slicer.DegradedStrategy")
def test_padding_masked_step_on_four_devices_equals_torch():
    """A boolean padding mask [B, 1, 1, S] travels with the keys; batch 2: the linears' and the loss's merges of
    [B, S] into rows are traced sequence-major (frontends/decomp_rows.py), so nothing is gathered (no
    DegradedStrategy); the tokens, targets and mask enter in zig-zag order."""
    model, loss_fn, batch = one_block_gpt("bool_mask", 2)
    optimizer = slicer.SGD(0.1)
    step = slicer.training_step(model, loss_fn, *batch, optimizer=optimizer)
    prog = slicer.compile(step, mesh=slicer.Mesh(x=4), tactics=st.context_parallel(step, "x"))
    assert "all_gather" not in prog.explain().split("propagation:")[0]
    assert [(i, d) for i, d, _ in prog.imported.input_order] == [(0, 1), (1, 1), (2, 3)]
    loss_error, param_error = train.compare(model, loss_fn, batch, optimizer, prog, steps=1)
    assert loss_error <= 1e-5 and param_error <= 1e-5, (loss_error, param_error)


class Shifted(torch.nn.Module):
    """Causal attention over embeddings, the next token predicted by a shift inside the loss (as HF's models)."""

    def __init__(self):
        super().__init__()
        self.wte, self.head = torch.nn.Embedding(16, 4), torch.nn.Linear(4, 16)

    def forward(self, idx):
        x = self.wte(idx).unsqueeze(1)
        return self.head(F.scaled_dot_product_attention(x, x, x, is_causal=True).squeeze(1))


def test_a_loss_that_reads_positions_keeps_the_plain_order():
    """A loss that shifts the sequence is not the same on the zig-zag order: the step is imported in the plain one
    (the check in torch when compiling, context_import.py); a loss over positions alone takes the order."""
    torch.manual_seed(0)
    model, idx = Shifted(), torch.randint(0, 16, (1, 8))

    def shifted(m, idx):
        return F.cross_entropy(m(idx)[:, :-1].flatten(0, 1), idx[:, 1:].flatten())

    def aligned(m, idx):
        return F.cross_entropy(m(idx).flatten(0, 1), idx.flatten())

    for loss_fn, balanced in ((shifted, False), (aligned, True)):
        step = slicer.training_step(model, loss_fn, idx, optimizer=slicer.SGD(0.1))
        assert bool(import_in_blocks(step, 2, {"idx": 1}).input_order) == balanced


class Positions(torch.nn.Module):
    """Token and position embeddings, as nanoGPT adds them (`wpe(arange(S))`)."""

    def __init__(self):
        super().__init__()
        self.wte, self.wpe = torch.nn.Embedding(16, 4), torch.nn.Embedding(8, 4)

    def forward(self, idx):
        return self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))


@pytest.mark.filterwarnings("error::slicer.DegradedStrategy")
def test_a_sequence_of_one_batch_row_reads_its_positions_at_its_own_block():
    """Batch 1, the sequence tiled over x=2: each device looks up the positions of its own tokens (torch-mlir's
    bounds asserts on a position do not block the loop: rules/gathers.py); equal to torch, nothing gathered."""
    torch.manual_seed(0)
    model, idx = Positions(), torch.randint(0, 16, (1, 8))
    program = slicer.from_torch(model, idx)
    prog = slicer.compile(program, mesh=slicer.Mesh(x=2), tactics=[slicer.Tile(arg="idx", dim=1, axes="x"),
                                                                   slicer.Tile(result=0, dim=1, axes="x")])
    assert "all_gather" not in prog.explain().split("propagation:")[0]
    with torch.no_grad():
        np.testing.assert_allclose(prog.run(idx), model(idx).numpy(), rtol=1e-6)
