"""A degraded strategy on a PyTorch model: Megatron on a GPT-2 block of 6 heads (D=96) on y=4 cannot split
the heads, so the output projection's weight is gathered and attention runs whole on every device: a
`DegradedStrategy` warning names the tactic, the op and why ("size 6, which y=4 does not divide"); the result
still equals torch, and strict=True raises. The textbook block (4 heads on y=4 or y=2) says nothing."""

import re
import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import slicer  # noqa: E402
from example_modules import load  # noqa: E402

models = load("torch/models.py", "torch_models")
MEGATRON = slicer.parse_tactics(models.STRATEGIES["gpt2_block"]["megatron"][0])


def block(d_model: int, heads: int):
    torch.manual_seed(0)
    model = models.GPT2Block(d_model, heads, max_len=8).eval()
    x = torch.randn(2, 8, d_model)
    return model, x, slicer.from_torch(model, x)


def compiled(imported, devices: int, **options):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prog = slicer.compile(imported, mesh=slicer.Mesh(y=devices), tactics=MEGATRON, **options)
    return prog, [str(w.message) for w in caught if issubclass(w.category, slicer.DegradedStrategy)]


@pytest.mark.slow
def test_six_heads_on_four_devices_warn_and_equal_torch():
    model, x, imported = block(96, 6)
    prog, said = compiled(imported, 4)
    assert said and all(m.startswith("Tile(arg='attn.c_proj.weight', dim=1, axes='y') is degraded") for m in said)
    assert re.search(r"dim \d of 'tensor.expand_shape' has size 6, which y=4 does not divide", said[0])
    assert "gpt2_block" in said[0]  # where: the model's module
    assert said[0] in prog.explain()
    got = prog.run(x)
    assert models.relative_error(got, models.eager(model, (x,))) <= 1e-5
    with pytest.raises(slicer.TacticError, match=re.escape("Tile(arg='attn.c_proj.weight', dim=1, axes='y') is "
                                                           "degraded")):
        compiled(imported, 4, strict=True)


@pytest.mark.parametrize("devices", [2, 4])
@pytest.mark.slow
def test_the_textbook_megatron_block_says_nothing(devices):
    _, _, imported = block(32, 4)
    prog, said = compiled(imported, devices, strict=True)
    assert said == [] and "warning:" not in prog.explain()


@pytest.mark.slow
def test_a_cause_in_every_layer_is_one_warning_whatever_the_depth():
    """3 heads on y=2 in every block of a GPT's training step: the weights of every layer lose their split, forward
    and backward, for the same reason. One warning per reason (naming every tactic and place), not per layer."""
    train = load("torch/train_step.py", "train_step")
    counts = []
    for layers in (1, 3):
        model, loss_fn, batch = train.gpt(n_head=3, d_model=24, n_layer=layers)
        step = slicer.training_step(model, loss_fn, *batch, optimizer=slicer.SGD(0.1))
        tactics = slicer.strategies.megatron(step, "y", column=["blocks.*.attn.c_attn.*"],
                                             row=["blocks.*.attn.c_proj.weight"])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            slicer.compile(step, mesh=slicer.Mesh(y=2), tactics=tactics)
        said = [str(w.message) for w in caught if issubclass(w.category, slicer.DegradedStrategy)]
        assert said and all("which y=2 does not divide" in m for m in said)
        counts.append(len(said))
    assert counts[0] == counts[1]
    assert "blocks.0.attn.c_attn.weight" in said[0] and " more" in said[0] and "gpt2_block.py:" in said[0]
