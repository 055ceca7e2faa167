"""PyTorch models partitioned end to end on MPI ranks: a GPT-2 block and torch's nn.TransformerEncoderLayer
(exact gelu, a boolean attention mask), imported with slicer.from_torch, each Megatron-style (exactly two
all_reduces in the forward pass), sequence-parallel (keys and values gathered) and data-parallel (no
collective) on 2 and 4 ranks, equal to torch eager (relative error <= 1e-5)."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

from example_modules import collective_ops, load  # noqa: E402

import slicer  # noqa: E402

models = load("torch/models.py", "torch_models")

CASES = [(name, strategy, ranks) for name in models.MODELS for strategy in models.STRATEGIES[name]
         for ranks in (2, 4)]
_IMPORTED = {}


def imported(name):
    if name not in _IMPORTED:
        model, inputs = models.MODELS[name]()
        _IMPORTED[name] = (inputs, slicer.from_torch(model, *inputs), models.eager(model, inputs))
    return _IMPORTED[name]


@pytest.mark.parametrize("name, strategy, ranks", CASES, ids=[f"{n}-{s}-{r}ranks" for n, s, r in CASES])
def test_model_on_mpi_ranks_equals_torch(name, strategy, ranks):
    inputs, program, want = imported(name)
    tactics, axis = models.STRATEGIES[name][strategy]
    prog = slicer.compile(program, mesh=slicer.Mesh(**{axis: ranks}), tactics=slicer.parse_tactics(tactics))
    assert collective_ops(prog) == models.COLLECTIVES[strategy]
    got = prog.run(*inputs, ranks=ranks, timeout=300)
    assert models.relative_error(got, want) <= 1e-5


@pytest.mark.parametrize("name", list(models.DATA_PARALLEL_MODELS))
def test_data_parallel_model_on_2_ranks_equals_torch(name):
    """A MoE layer (mask router) and a CNN with BatchNorm (eval): the batch over x=2, no collective."""
    build, input_name = models.DATA_PARALLEL_MODELS[name]
    model, inputs = build()
    prog = slicer.compile(slicer.from_torch(model, *inputs), mesh=slicer.Mesh(x=2),
                          tactics=[slicer.Tile(arg=input_name, dim=0, axes="x")])
    assert collective_ops(prog) == []
    assert models.relative_error(prog.run(*inputs, ranks=2, timeout=300), models.eager(model, inputs)) <= 1e-5
