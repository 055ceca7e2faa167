"""Errors about imported models name the Python line of the user's model: every op of an imported program
carries the location of the line that wrote it (the innermost frame outside torch, torch-mlir and Slicer), and
an op propagation cannot pass gets advice in the model's terms (the line, the tactic's argument)."""

import re

import pytest

import slicer

# An op with no propagation rule (tensor.reshape), located at a line of a Python model as from_torch locates it.
RESHAPE = """func.func @f(%a: tensor<8x4xf32>) -> tensor<32xf32> {
  %s = arith.constant dense<32> : tensor<1xindex>
  %r = tensor.reshape %a(%s) : (tensor<8x4xf32>, tensor<1xindex>) -> tensor<32xf32> loc(LOC)
  return %r : tensor<32xf32>
}"""


def _error(location: str) -> str:
    with pytest.raises(slicer.CompileError) as caught:
        slicer.compile(RESHAPE.replace("LOC", location), mesh=slicer.Mesh(x=2),
                       tactics=[slicer.Tile(arg=0, dim=0, axes="x")])
    return str(caught.value)


def test_an_op_of_a_model_is_reported_at_its_python_line_with_advice_in_the_models_terms():
    message = _error('"/home/user/model.py":12:0')
    assert "computes at /home/user/model.py:12" in message
    assert "Tile(arg=0, dim=0, axes='x')" in message and "slicer.Replicate" in message
    assert "annotate" not in message  # no advice about intermediate values a torch user never sees


def test_an_op_of_mlir_text_keeps_the_advice_for_mlir():
    message = _error('"prog.mlir":3:8')
    assert "prog.mlir" in message and "slicer.annotate" in message and "computes at" not in message


@pytest.mark.slow
def test_imported_ops_carry_the_line_of_the_model_not_of_torch():
    pytest.importorskip("torch")
    pytest.importorskip("torch_mlir")
    from example_modules import load

    models = load("torch/models.py", "torch_models")
    model, inputs = models.gpt2_block()
    text = slicer.from_torch(model, *inputs).text
    files = set(re.findall(r'loc\("([^"]+)":\d+:\d+\)', text))
    assert files and all(f.endswith("examples/torch/gpt2_block.py") for f in files), files
