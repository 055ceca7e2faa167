"""A pipeline stage's joint graph (forward, then autograd's backward) cut into its forward and backward
(`frontends/stage_partition.py`): run one after the other they give the joint graph's results, and the forward
saves activations, not copies of weights (a transposed weight is recomputed by the backward)."""

import pytest

torch = pytest.importorskip("torch")

from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from slicer.frontends.stage_partition import partition  # noqa: E402


def joint(x, grad, w, accumulated):
    """A stage computing tanh(x @ w.T): its output, the gradient of its input, its weight's gradient added to
    the accumulated one (the arguments and results in the order stage_programs traces them)."""
    x_, w_ = x.detach().requires_grad_(), w.detach().requires_grad_()
    y = torch.tanh(x_ @ w_.t())
    dx, dw = torch.autograd.grad([y], [x_, w_], grad_outputs=[grad])
    return y, dx, accumulated + dw


def test_forward_then_backward_equal_the_joint_graph_and_save_no_weight():
    generator = torch.Generator().manual_seed(0)
    x, w = torch.randn(4, 5, generator=generator), torch.randn(3, 5, generator=generator)
    grad, accumulated = torch.randn(4, 3, generator=generator), torch.randn(3, 5, generator=generator)
    cut = partition(torch, make_fx(joint)(x, grad, w, accumulated), front=1, grads=1, owned=1, outputs=1)
    y, *saved = cut.forward(x, w)
    dx, dw = cut.backward(x, *saved, grad, w, accumulated)
    want = joint(x, grad, w, accumulated)
    for got, expected in zip((y, dx, dw), want):
        torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
    assert cut.saved == len(saved) >= 1
    assert all(tuple(s.shape) == (4, 3) for s in saved), [tuple(s.shape) for s in saved]  # tanh's output only
