"""The import's own decompositions (slicer.frontends.decompositions), run by torch eager against the aten ops they
replace: the embedding's backward and the negative log-likelihood's forward and backward as one-hot forms
(every reduction, class weights, ignore_index, padding_idx, scale_grad_by_freq), integral powers without fpowi;
and what they leave in the imported IR (no tm_tensor.scatter, no math.fpowi)."""

import itertools

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import slicer  # noqa: E402
from slicer.frontends.decompositions import decompositions  # noqa: E402

aten = torch.ops.aten
TABLE = decompositions(torch)


def close(got, want):
    if isinstance(want, tuple):
        return all(close(g, w) for g, w in zip(got, want))
    return got.shape == want.shape and torch.allclose(got, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("padding_idx, scale", list(itertools.product([-1, 3], [False, True])))
def test_embedding_backward_is_torchs(padding_idx, scale):
    torch.manual_seed(0)
    grad, indices = torch.randn(4, 6, 5), torch.randint(0, 10, (4, 6))
    args = (grad, indices, 10, padding_idx, scale)
    assert close(TABLE[aten.embedding_dense_backward.default](*args), aten.embedding_dense_backward(*args))


@pytest.mark.parametrize("weighted, reduction, ignore_index, batched",
                         list(itertools.product([False, True], [0, 1, 2], [-100, 2], [False, True])))
def test_nll_loss_forward_and_backward_are_torchs(weighted, reduction, ignore_index, batched):
    torch.manual_seed(1)
    logp = torch.randn(8, 5).log_softmax(-1) if batched else torch.randn(5).log_softmax(-1)
    target = torch.tensor([0, 2, 4, 2, 1, 3, 2, 0]) if batched else torch.tensor(2 if ignore_index != 2 else 4)
    weight = torch.rand(5) + 0.5 if weighted else None
    args = (logp, target, weight, reduction, ignore_index)
    want = aten.nll_loss_forward(*args)
    assert close(TABLE[aten.nll_loss_forward.default](*args), want)
    grad_output = torch.randn(8) if reduction == 0 and batched else torch.tensor(0.7)
    backward = (grad_output, logp, target, weight, reduction, ignore_index, want[1])
    assert close(TABLE[aten.nll_loss_backward.default](*backward), aten.nll_loss_backward(*backward))


@pytest.mark.parametrize("exponent", [0, 1, 2, 3, -1, -2, 5, 2.0, 0.5])
def test_integral_powers_are_torchs(exponent):
    x = torch.rand(16) + 0.5
    got = TABLE[aten.pow.Tensor_Scalar](x, exponent)
    if exponent in (5, 0.5):  # a float exponent other than torch's special cases is left to math.powf
        assert got is NotImplemented or close(got, x ** exponent)
    else:
        assert torch.equal(got, x ** exponent)


@pytest.mark.slow
def test_imported_backward_stays_in_linalg():
    embedding = torch.nn.Embedding(10, 4)

    def step(weight, idx, target):
        def loss(weight):
            logits = torch.nn.functional.embedding(idx, weight) @ weight.T
            return torch.nn.functional.cross_entropy(logits, target) + (weight ** 2).sum()
        return torch.func.grad(loss)(weight)

    idx, target = torch.randint(0, 10, (6,)), torch.randint(0, 10, (6,))
    program = slicer.from_torch(step, embedding.weight.detach(), idx, target)
    assert "tm_tensor" not in program.text and "math.fpowi" not in program.text
