"""A whole GPT-style model (token and position embeddings, two blocks, LM head; examples/torch/gpt.py) on MPI
ranks under the strategies that once did not finish compiling (data parallel, data + Megatron on 2x2), and FSDP
and Megatron: equal to torch eager, with the collectives each strategy is known for."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import slicer  # noqa: E402
from example_modules import collective_ops, load  # noqa: E402

gpt = load("torch/gpt.py", "gpt")
models = load("torch/models.py", "torch_models")
DEPTH = 2
CASES = [("data", 2), ("data", 4), ("data_megatron", 2), ("data_megatron", 4), ("fsdp", 2), ("megatron", 2)]
# devices of the data axis x and the model axis y for each strategy and number of ranks
MESHES = {("data_megatron", 2): (1, 2), ("data_megatron", 4): (2, 2)}


@pytest.fixture(scope="module")
def imported():
    model, inputs = gpt.tiny_gpt(DEPTH)
    return inputs, slicer.from_torch(model, *inputs), models.eager(model, inputs)


@pytest.mark.parametrize("strategy, ranks", CASES, ids=[f"{s}-{r}ranks" for s, r in CASES])
def test_tiny_gpt_on_mpi_ranks_equals_torch(imported, strategy, ranks):
    inputs, program, want = imported
    data, model = MESHES.get((strategy, ranks), (ranks, ranks))
    tactics, mesh = gpt.strategies(DEPTH, data=data, model=model)[strategy]
    prog = slicer.compile(program, mesh=mesh, tactics=slicer.parse_tactics(tactics))
    ops = collective_ops(prog)
    if strategy == "data":
        assert ops == []
    elif strategy == "fsdp":
        assert set(ops) == {"shard.all_gather"}  # each parameter gathered where it is used, nothing else
    else:
        assert ops == ["shard.all_reduce"] * (2 * DEPTH)  # Megatron-LM's two per block
    got = prog.run(*inputs, ranks=ranks, timeout=300)
    assert models.relative_error(got, want) <= 1e-5
