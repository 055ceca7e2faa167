"""torch-mlir's lowering runs in a child process (frontends/torch_lowering.py): a model on which torch-mlir
crashes (a scatter_reduce) raises a FrontendError naming the op and the Python source line, and this process
lives on. A MoE router writing its gates with torch.topk and torch.scatter (on which torch-mlir alone crashes)
imports as one-hot forms, as its mask router does, and both equal torch."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import slicer  # noqa: E402
from example_modules import collective_ops, load  # noqa: E402
from slicer.core.source_lines import source_line, user_frame  # noqa: E402

models = load("torch/models.py", "torch_models")


class ScatterReduce(torch.nn.Module):
    """The largest of each row's logits per bucket: `scatter_reduce` with amax, which torch-mlir crashes on."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)

    def forward(self, x, buckets):
        return torch.zeros(x.shape[0], 3).scatter_reduce(-1, buckets, self.linear(x), reduce="amax")  # CRASHES


@pytest.mark.slow
def test_a_torch_mlir_crash_is_a_frontend_error_in_a_live_process():
    with pytest.raises(slicer.FrontendError) as caught:
        slicer.from_torch(ScatterReduce(), torch.randn(2, 8), torch.randint(0, 3, (2, 4)))
    message = str(caught.value)
    assert "torch.aten.scatter_reduce.two" in message and "crashed" in message
    with open(__file__) as source:
        line = next(i for i, text in enumerate(source, 1) if text.rstrip().endswith("# CRASHES"))
    assert f"test_torch_lowering.py:{line}" in message  # the user's line, not torch's linear.py
    assert "linear.py" not in message
    # still alive: the next import works
    program = slicer.from_torch(lambda a: torch.tanh(a), torch.randn(4))
    assert program.arg_names == ("a",)


@pytest.mark.parametrize("scatter", [False, True])
@pytest.mark.slow
def test_moe_routers_import_and_equal_torch(scatter):
    model, inputs = models.moe(scatter=scatter)
    want = models.eager(model, inputs)
    program = slicer.from_torch(model, *inputs)
    assert "tm_tensor" not in program.text
    prog = slicer.compile(program, mesh=slicer.Mesh(x=2), tactics=[slicer.Tile(arg="x", dim=0, axes="x")])
    assert collective_ops(prog) == []
    assert models.relative_error(prog.run(*inputs), want) <= 1e-5


def test_the_user_frame_skips_library_frames():
    import torch.nn.modules.linear as linear

    text = f'loc(callsite("{linear.__file__}":134:0 at callsite("/home/u/model.py":67:0 at "/home/u/run.py":3:0)))'
    assert user_frame(text) == ("/home/u/model.py", 67)
    assert source_line(text) == "/home/u/model.py:67"
    assert source_line('loc("prog.mlir":3:5)') is None  # MLIR text: no Python frame
    assert source_line(f'loc("{linear.__file__}":134:0)').endswith("linear.py:134")  # only torch: its line
