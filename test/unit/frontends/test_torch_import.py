"""`torch_import.trace` traces on fake tensors first and on the example tensors where that fails or leaves a shape
symbolic (`TRACING_MODES`): the program is the one the real trace gives, for training steps, functions computing
gradients and tensor constants; the fallback is taken for an op fake tensors cannot run and for a data-dependent
shape, and a function neither mode can trace fails as the real trace does."""

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import slicer  # noqa: E402
from example_modules import load  # noqa: E402
from slicer.frontends import torch_import  # noqa: E402

train = load("torch/train_step.py", "train_step")
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "training"))
import model as gpt_model  # noqa: E402


@pytest.fixture
def traced_modes(monkeypatch):
    """The tracing modes make_fx was called with, in order, and whether each call returned a graph."""
    import torch.fx.experimental.proxy_tensor as proxy_tensor

    calls, make_fx = [], proxy_tensor.make_fx

    def recording(function, *args, tracing_mode="real", **kwargs):
        traced = make_fx(function, *args, tracing_mode=tracing_mode, **kwargs)

        def run(*inputs):
            calls.append([tracing_mode, False])
            graph = traced(*inputs)
            calls[-1][1] = True
            return graph
        return run

    monkeypatch.setattr(proxy_tensor, "make_fx", recording)
    return calls


def _gpt_step():
    torch.manual_seed(0)
    model = gpt_model.GPT(vocab=16, seq=8, d_model=16, n_head=2, n_layer=1)
    batch = gpt_model.batch(torch.Generator().manual_seed(0), 4, 8, 16)
    return slicer.training_step(model, gpt_model.loss_fn, *batch, optimizer=slicer.AdamW(0.01))


def _mlp_step():
    model, loss_fn, batch = train.mlp()
    return slicer.training_step(model, loss_fn, *batch, optimizer=slicer.SGD(0.1, momentum=0.9))


class _Scaled(torch.nn.Module):
    """A model whose forward makes tensors from Python data (constants of the graph)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.linear(x) * torch.tensor([1.0, 2.0, 3.0]) + torch.arange(3.0)


def _constants_step():
    return slicer.training_step(_Scaled(), lambda m, x, y: ((m(x) - y) ** 2).mean(), torch.randn(5, 4),
                                torch.randn(5, 3), optimizer=slicer.SGD(0.1))


def _autograd_function():
    def step(w, x):
        w = w.clone().requires_grad_()
        loss = ((x @ w) ** 2).mean()
        (grad,) = torch.autograd.grad(loss, [w])
        return loss.detach(), (w - 0.1 * grad).detach()
    return slicer.from_torch(step, torch.randn(4, 3), torch.randn(6, 4))


@pytest.mark.parametrize("make", [_gpt_step, _mlp_step, _constants_step, _autograd_function],
                         ids=["gpt-adamw", "mlp-sgd", "constants", "autograd-function"])
@pytest.mark.slow
def test_the_fake_trace_imports_the_program_of_the_real_one(make, traced_modes, monkeypatch):
    fast = make()
    traced = [mode for mode, done in traced_modes if done]  # (from_torch tries torch.export first, which fails)
    assert traced and set(traced) == {"fake"}
    monkeypatch.setattr(torch_import, "TRACING_MODES", ("real",))
    real = make()
    assert fast.text == real.text and fast.arg_names == real.arg_names


def test_an_op_fake_tensors_cannot_run_is_traced_on_the_example_tensors(traced_modes):
    from torch._subclasses.fake_tensor import FakeTensor

    def only_real(x):
        if isinstance(x, FakeTensor):
            raise RuntimeError("no fake implementation")
        return x * 2

    graph = torch_import.trace(torch, only_real, [torch.randn(3)])
    assert traced_modes == [["fake", False], ["real", True]]
    assert [n.target for n in graph.graph.nodes if n.op == "call_function"] == [torch.ops.aten.mul.Tensor]


def test_a_data_dependent_shape_is_traced_on_the_example_tensors(traced_modes):
    def positive_sum(x):
        return x[x > 0].sum(), x[x > 0]

    graph = torch_import.trace(torch, positive_sum, [torch.tensor([1.0, -2.0, 3.0])])
    assert traced_modes == [["fake", True], ["real", True]]
    [output] = [n for n in graph.graph.nodes if n.op == "output"]
    assert list(output.args[0][1].meta["val"].shape) == [2]  # the example's size, not a symbol


def test_what_neither_mode_can_trace_fails_as_the_real_trace_does(traced_modes):
    def branches_on_data(x):
        return x + 1 if x.sum() > 0 else x - 1

    with pytest.raises(RuntimeError, match="get value out of a tracing tensor"):
        torch_import.trace(torch, branches_on_data, [torch.randn(3)])
    assert [mode for mode, _ in traced_modes] == ["fake", "real"]
