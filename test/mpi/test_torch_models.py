"""The PyTorch model zoo of examples/torch (models.py: the GPT-2 block, torch's nn.TransformerEncoderLayer, a
ViT, a BERT encoder with a padding mask, a LLaMA block, a Mixtral-style MoE layer, a CNN with BatchNorm,
and whatever is registered there later) partitioned end to
end on 2 MPI ranks under every strategy registered for it (Megatron: two all_reduces per block; sequence
parallel: keys and values gathered; data parallel: no collective), each equal to torch eager (relative error
<= 1e-5) and none a degraded strategy (strict=True). Every run goes to one warm job of 2 ranks
(`SLICER_KEEP_RANKS`, set by test/conftest.py); the two blocks on meshes of 4 devices are the simulator runs of
test/unit/frontends/test_from_torch.py, the GPT's strategies on 4 ranks test_gpt.py."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import slicer  # noqa: E402
from example_modules import collective_ops, load  # noqa: E402

models = load("torch/models.py", "torch_models")

RANKS = 2
CASES = [(name, strategy) for name in models.MODELS for strategy in models.STRATEGIES[name]]
_IMPORTED = {}


def imported(name):
    if name not in _IMPORTED:
        model, inputs = models.MODELS[name]()
        _IMPORTED[name] = (inputs, slicer.from_torch(model, *inputs), models.eager(model, inputs))
    return _IMPORTED[name]


def test_every_model_has_strategies():
    assert set(models.STRATEGIES) >= set(models.MODELS)
    assert all(models.STRATEGIES[name] for name in models.MODELS)


@pytest.mark.parametrize("name, strategy", CASES, ids=[f"{n}-{s}" for n, s in CASES])
def test_model_on_mpi_ranks_equals_torch(name, strategy):
    inputs, program, want = imported(name)
    tactics, axis = models.STRATEGIES[name][strategy]
    prog = slicer.compile(program, mesh=slicer.Mesh(**{axis: RANKS}), tactics=slicer.parse_tactics(tactics),
                          strict=True)
    assert collective_ops(prog) == models.collectives(name, strategy)
    got = prog.run(*inputs, ranks=RANKS, timeout=300)
    assert models.relative_error(got, want) <= 1e-5
