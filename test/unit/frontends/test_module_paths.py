"""Module paths in an imported training step: each op's location names the module of the model that computed
it (`module:<path>`, as `named_modules` spells it) around the user's line, and `strategies.remat` matches its
pattern against these paths."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

from mlir import ir  # noqa: E402

import slicer  # noqa: E402
from example_modules import load  # noqa: E402
from slicer import strategies as st  # noqa: E402
from slicer.core.source_lines import module_path, source_line  # noqa: E402
from slicer.dialect import make_context, walk_ops  # noqa: E402

train = load("torch/train_step.py", "train_step")


@pytest.fixture(scope="module")
def step():
    model, loss_fn, batch = train.mlp()
    return slicer.training_step(model, loss_fn, *batch, optimizer=slicer.SGD(0.1))


def test_ops_are_located_in_their_module_and_line(step):
    with make_context():
        module = ir.Module.parse(step.text)
        located = [(module_path(op.location), source_line(op.location)) for op in walk_ops(module.operation)]
    paths = {path for path, _ in located if path}
    assert {"0", "1", "2"} <= paths  # Linear, Tanh, Linear of the Sequential
    assert all(line and line.split(":")[0].endswith("train_step.py") for path, line in located if path == "1")


def test_module_path_of_a_fused_location_is_the_deepest_common_module():
    assert module_path('loc(fused["module:blocks.0.attn.proj"("m.py":3:0), "module:blocks.0"("m.py":4:0)])') \
        == "blocks.0"
    assert module_path('loc(fused["module:blocks.0", "module:blocks.1"])') == "blocks"
    assert module_path('loc(fused["module:", "module:blocks.1"])') is None
    # a constant folded into an op carries any of its users' modules: the op's own (the first) wins
    assert module_path('loc(fused["module:blocks.3.attn"("m.py":34:0), "module:wte"("m.py":62:0)])') \
        == "blocks.3.attn"
    assert module_path('loc("m.py":3:0)') is None


def test_remat_strategy_checks_its_pattern_against_the_modules(step):
    assert st.remat(step, "*", "save_dots") == [slicer.Remat(pattern="*", policy="save_dots")]
    with pytest.raises(slicer.InvalidTactic, match=r"strategies.remat: the pattern 'blocks\.\*' matches no module"):
        st.remat(step, "blocks.*")
    with pytest.raises(slicer.InvalidTactic, match="policy='most' must be one of"):
        st.remat(step, "*", "most")
