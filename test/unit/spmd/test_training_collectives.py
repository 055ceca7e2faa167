"""Training steps (slicer.training_step with SGD-momentum, partitioned by slicer.strategies) get the textbook
collectives per strategy: the counts per (collective, axis) are pinned on a 2-layer MLP, with the bytes each
device receives on the data-parallel and ZeRO steps. The strategies and the step are
benchmarks/training_partition.py's; the same counts per transformer block of a GPT are pinned by
test/Training/gpt_step_collectives.py, and test/mpi/test_training_strategies.py checks every strategy's steps
against torch."""

import functools
import importlib.util
import warnings
from collections import Counter
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import slicer  # noqa: E402
from slicer.spmd import report  # noqa: E402

_SPEC = importlib.util.spec_from_file_location(
    "training_partition", Path(__file__).resolve().parents[3] / "benchmarks" / "training_partition.py")
tp = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(tp)

DIMS = {"batch": 2, "seq": 4, "d_model": 16, "n_head": 2, "vocab": 32}

# (op, axis) -> count per strategy, for the MLP's 4 parameters. The loss is all-reduced over x once wherever
# the batch is split.
EXPECTED = {
    "data": {("all_reduce", "x"): 4 + 1},
    "zero1": {("reduce_scatter", "x"): 4, ("all_gather", "x"): 4, ("all_reduce", "x"): 1},
    "zero3": {("reduce_scatter", "x"): 4, ("all_gather", "x"): 4, ("all_reduce", "x"): 1},
    "megatron": {("all_reduce", "y"): 1},  # forward; the input needs no gradient
    "data_megatron": {("all_reduce", "y"): 1, ("all_reduce", "x"): 4 + 1},
}


@functools.cache
def step():
    """(model, imported training step), once."""
    warnings.filterwarnings("ignore")
    model, batch, loss_fn = tp.build_model("mlp", 1, DIMS)
    return model, tp.training_step(model, batch, loss_fn)


def collectives(prog):
    from mlir import ir

    from slicer.dialect import make_context

    with make_context():
        return report(ir.Module.parse(prog.spmd)).collectives


@pytest.mark.parametrize("strategy", tp.STRATEGIES)
@pytest.mark.slow
def test_collectives_per_strategy(strategy):
    """The partitioner's collectives, before the schedule's rewrites (bucketing would combine them)."""
    model, imported = step()
    tactics, mesh = tp.strategy_tactics(strategy, imported, "mlp")
    prog = slicer.compile(imported, mesh=slicer.Mesh(**mesh), tactics=tactics, buckets="off",
                          collective_matmul="off")
    found = collectives(prog)
    assert Counter((c.op.split(".")[-1], ",".join(c.mesh_axes)) for c in found) == EXPECTED[strategy]
    param_bytes = sum(p.numel() * 4 for p in model.parameters())
    if strategy in ("data", "zero1", "zero3"):
        # every gradient's bytes once (an all_reduce over 2 devices receives its block, a reduce_scatter and
        # an all_gather half of it each), plus the loss
        assert sum(c.bytes_received_per_device for c in found) == param_bytes + 4
    if strategy == "data":  # the activations halve: no more than the unpartitioned step holds
        assert prog.memory().peak <= prog.memory().unpartitioned_peak


@pytest.mark.slow
def test_data_parallel_gradients_in_one_bucket():
    """With the schedule's rewrites (the default), the 4 gradients' all_reduces are one bucket moving the same
    bytes; the loss's scalar all_reduce stays apart."""
    model, imported = step()
    tactics, mesh = tp.strategy_tactics("data", imported, "mlp")
    found = collectives(slicer.compile(imported, mesh=slicer.Mesh(**mesh), tactics=tactics))
    assert Counter((c.op.split(".")[-1], ",".join(c.mesh_axes)) for c in found) == {("all_reduce", "x"): 2}
    assert sum(c.bytes_received_per_device for c in found) == sum(p.numel() * 4 for p in model.parameters()) + 4
