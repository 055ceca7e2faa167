"""torch-mlir's lowering runs in a child process (frontends/torch_lowering.py): a model on which torch-mlir
crashes (a MoE router writing its gates with torch.scatter) raises a FrontendError naming the op and the Python
source line, and this process lives on; the same MoE with a mask router imports and equals torch."""

import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

from example_modules import collective_ops, load  # noqa: E402

import slicer  # noqa: E402
from slicer.core.source_lines import source_line, user_frame  # noqa: E402

models = load("torch/models.py", "torch_models")


def test_scatter_router_is_a_frontend_error_in_a_live_process():
    model, inputs = models.moe(scatter=True)
    with pytest.raises(slicer.FrontendError) as caught:
        slicer.from_torch(model, *inputs)
    message = str(caught.value)
    assert "torch.aten.scatter.src" in message and "crashed" in message
    assert re.search(r"examples/torch/moe\.py:\d+", message)  # the user's line, not torch's linear.py
    assert "linear.py" not in message
    # still alive: the next import works
    program = slicer.from_torch(lambda a: torch.tanh(a), torch.randn(4))
    assert program.arg_names == ("a",)


def test_mask_router_imports_and_equals_torch():
    model, inputs = models.moe(scatter=False)
    want = models.eager(model, inputs)
    prog = slicer.compile(slicer.from_torch(model, *inputs), mesh=slicer.Mesh(x=2),
                          tactics=[slicer.Tile(arg="x", dim=0, axes="x")])
    assert collective_ops(prog) == []
    assert models.relative_error(prog.run(*inputs), want) <= 1e-5


def test_the_user_frame_skips_library_frames():
    import torch.nn.modules.linear as linear

    text = f'loc(callsite("{linear.__file__}":134:0 at callsite("/home/u/model.py":67:0 at "/home/u/run.py":3:0)))'
    assert user_frame(text) == ("/home/u/model.py", 67)
    assert source_line(text) == "/home/u/model.py:67"
    assert source_line('loc("prog.mlir":3:5)') is None  # MLIR text: no Python frame
    assert source_line(f'loc("{linear.__file__}":134:0)').endswith("linear.py:134")  # only torch: its line
