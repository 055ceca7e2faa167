"""`slicer.auto` under a memory budget that no layout meets without rematerialisation (a training step of two
numbered MLP blocks on x=2, its activations far larger than its parameters; 0.8x the smallest peak the memory
objective finds): it returns a remat plan with the layout, whose compiled peak fits, and `explain()` says why
remat was chosen. A small model on purpose: the budgeted search compiles every candidate it tries (16 before it
gives up without remat), and a block of two linears compiles in a fraction of a GPT block's time; remat on the
GPT step itself runs in test/mpi/test_remat_mpi.py and test/Transforms/slicer-remat.mlir."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import slicer  # noqa: E402
from slicer import strategies as st  # noqa: E402

nn = torch.nn


class Block(nn.Module):
    """A residual MLP block whose activations (tanh, sigmoid and their products) remat can recompute."""

    def __init__(self, d: int):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        h = self.fc1(x)
        return x + self.fc2(torch.tanh(h) * torch.sigmoid(h) * h)


class Blocks(nn.Module):
    """Two numbered blocks (`blocks.0`, `blocks.1`: what `remat_plans` looks for) and a classifier head."""

    def __init__(self, d: int = 16, classes: int = 4):
        super().__init__()
        self.blocks = nn.ModuleList([Block(d) for _ in range(2)])
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


@pytest.mark.slow
def test_auto_chooses_remat_when_only_remat_meets_the_budget():
    torch.manual_seed(0)
    x, y = torch.randn(512, 16), torch.randint(0, 4, (512,))
    step = slicer.training_step(Blocks(), lambda m, x, y: nn.functional.cross_entropy(m(x), y), x, y,
                                optimizer=slicer.SGD(0.1))
    assert [(r.pattern, r.policy) for r in st.remat_plans(step)] == [("blocks.*", "save_dots"), ("blocks.*", "full")]
    smallest = slicer.auto(step, slicer.Mesh(x=2), objective="memory").memory_bytes
    budget = int(smallest * 0.8)
    found = slicer.auto(step, slicer.Mesh(x=2), memory_budget=budget)
    assert isinstance(found.tactics[-1], slicer.Remat) and found.memory_bytes <= budget
    assert "rematerialisation save_dots on blocks.*: without remat no partitioning found fits" in found.explain()
    prog = slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=found.tactics)
    assert prog.memory().peak == found.memory_bytes
