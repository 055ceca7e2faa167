"""`slicer.auto` under a memory budget that no layout meets without rematerialisation (a 2-block GPT step on
x=2, 0.8x the smallest peak the memory objective finds): it returns a remat plan with the layout, whose compiled
peak fits, and `explain()` says why remat was chosen."""

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import slicer  # noqa: E402
from slicer import strategies as st  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "training"))
import model as gpt_model  # noqa: E402


@pytest.mark.slow
def test_auto_chooses_remat_when_only_remat_meets_the_budget():
    torch.manual_seed(0)
    model = gpt_model.GPT(vocab=16, seq=64, d_model=32, n_head=2, n_layer=2)
    batch = gpt_model.batch(torch.Generator().manual_seed(0), 8, 64, 16)
    step = slicer.training_step(model, gpt_model.loss_fn, *batch, optimizer=slicer.SGD(0.1))
    assert [(r.pattern, r.policy) for r in st.remat_plans(step)] == [("blocks.*", "save_dots"), ("blocks.*", "full")]
    smallest = slicer.auto(step, slicer.Mesh(x=2), objective="memory").memory_bytes
    budget = int(smallest * 0.8)
    found = slicer.auto(step, slicer.Mesh(x=2), memory_budget=budget)
    assert isinstance(found.tactics[-1], slicer.Remat) and found.memory_bytes <= budget
    assert "rematerialisation save_dots on blocks.*: without remat no partitioning found fits" in found.explain()
    prog = slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=found.tactics)
    assert prog.memory().peak == found.memory_bytes
