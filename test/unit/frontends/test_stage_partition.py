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


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 6)

    def forward(self, x):
        return x + torch.tanh(self.fc(x)).square()


class Blocks(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(), Block()])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def traced_blocks():
    """(model, its joint graph traced with module paths, the example arguments) of a stage of two blocks."""
    from torch.fx import traceback as fx_traceback

    from slicer.frontends.module_paths import module_paths

    torch.manual_seed(0)
    model = Blocks()
    names = [n for n, _ in model.named_parameters()]

    def stage(x, grad, *rest):
        weights = [p.detach().requires_grad_() for p in rest[:len(names)]]
        x_ = x.detach().requires_grad_()
        y = torch.func.functional_call(model, dict(zip(names, weights)), (x_,))
        grads = torch.autograd.grad([y], [x_, *weights], grad_outputs=[grad])
        return (y, grads[0], *(a + g for a, g in zip(rest[len(names):], grads[1:])))

    params = [p.detach() for p in model.parameters()]
    args = [torch.randn(4, 6), torch.randn(4, 6), *params, *(torch.randn_like(p) for p in params)]
    with module_paths(torch, model), fx_traceback.preserve_node_meta():
        graph = make_fx(stage)(*args)
    return model, graph, args, stage


@pytest.mark.parametrize("policy, ops", [("none", None), ("full", ["add"]), ("save_dots", ["addmm", "add", "addmm"])])
def test_remat_saves_what_the_policy_keeps_and_recomputes_each_block_before_its_backward(policy, ops):
    """Under remat the forward saves each block's input (full) and its linear layer's result (save_dots), and
    the backward recomputes block 1's forward before block 0's, each just before that block's backward."""
    from slicer.frontends.module_paths import node_module_path
    from slicer.tactics import Remat

    _, graph, args, stage = traced_blocks()
    plain = partition(torch, graph, front=1, grads=1, owned=4, outputs=1)
    cut = partition(torch, graph, front=1, grads=1, owned=4, outputs=1,
                    remat=[Remat(pattern="blocks.*", policy=policy)])
    y, *saved = cut.forward(args[0], *args[2:6])
    inputs = [args[0], *saved, *args[1:]]
    got = (y, *cut.backward(*(a for a, kept in zip(inputs, cut.kept, strict=True) if kept)))
    for g, want in zip(got, stage(*args), strict=True):
        torch.testing.assert_close(g, want, rtol=1e-6, atol=1e-6)
    if policy == "none":
        assert cut.saved == plain.saved and all(u.recomputed == 0 for u in cut.remat)
        return
    def saved_ops(part):
        return [str(n.target).split(".")[1] for n in list(part.forward.graph.nodes)[-1].args[0][1:]]

    assert saved_ops(cut) == ops and saved_ops(plain) == ["tanh", "add", "tanh"]
    assert [u.name for u in cut.remat] == ["blocks.0", "blocks.1"]
    assert sum(u.saved for u in cut.remat) == 4 * 6 * 4 * len(ops)
    assert all(u.recomputed > 0 and u.cloned > 0 for u in cut.remat)
    order = [(node_module_path(n), str(n.target)) for n in cut.backward.graph.nodes if n.op == "call_function"]
    tanh = [i for i, (_, op) in enumerate(order) if op == "aten.tanh.default"]
    assert [order[i][0] for i in tanh] == ["blocks.1", "blocks.0"], order
    assert any(op.startswith("aten.mm") for _, op in order[tanh[0]:tanh[1]]), order  # block 1's backward between
