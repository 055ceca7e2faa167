"""Training steps (forward, backward, SGD-momentum update, traced by make_fx and imported by from_torch)
partition with the textbook collectives per strategy: the counts per (collective, axis) are pinned on a 2-layer
MLP and on one transformer block whose Q, K and V are separate linears, and the bytes each device receives on
the data-parallel and ZeRO steps; the block's Megatron and data + Megatron steps run on the simulator and equal
the traced step run by torch. The strategies and the step are benchmarks/training_partition.py's."""

import functools
import importlib.util
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
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

# (op, axis) -> count, per strategy. MLP: 4 parameters; block: 16 (ln_1, q, k, v, proj, ln_2, fc1, fc2: weight
# and bias each). The loss is all-reduced over x once wherever the batch is split.
EXPECTED = {
    "mlp": {
        "data": {("all_reduce", "x"): 4 + 1},
        "zero1": {("reduce_scatter", "x"): 4, ("all_gather", "x"): 4, ("all_reduce", "x"): 1},
        "zero3": {("reduce_scatter", "x"): 4, ("all_gather", "x"): 4, ("all_reduce", "x"): 1},
        "megatron": {("all_reduce", "y"): 1},  # forward; the input needs no gradient
        "data_megatron": {("all_reduce", "y"): 1, ("all_reduce", "x"): 4 + 1},
    },
    "qkv_blocks": {
        "data": {("all_reduce", "x"): 16 + 1},
        "zero1": {("reduce_scatter", "x"): 16, ("all_gather", "x"): 16, ("all_reduce", "x"): 1},
        "zero3": {("reduce_scatter", "x"): 16, ("all_gather", "x"): 16, ("all_reduce", "x"): 1},
        "megatron": {("all_reduce", "y"): 2 + 2},  # 2 forward, 2 backward (dq Wq + dk Wk + dv Wv once)
        "data_megatron": {("all_reduce", "y"): 2 + 2, ("all_reduce", "x"): 16 + 1},
    },
}


@functools.lru_cache(maxsize=None)
def traced(name):
    """(name, traced step, its example arguments, parameter names, imported program), once per model."""
    warnings.filterwarnings("ignore")
    model, batch, loss_fn = tp.build_model(name, 1, DIMS)
    graph, args, _, params = tp.training_step(model, batch, loss_fn)
    return name, graph, args, params, slicer.from_torch(graph, *args)


def collectives(prog):
    from mlir import ir

    from slicer.dialect import make_context

    with make_context():
        return report(ir.Module.parse(prog.spmd)).collectives


@pytest.mark.parametrize("model", sorted(EXPECTED))
@pytest.mark.parametrize("strategy", tp.STRATEGIES)
def test_collectives_per_strategy(model, strategy):
    name, graph, args, params, imported = traced(model)
    tactics, mesh = tp.strategy_tactics(strategy, params, 1)
    prog = slicer.compile(imported, mesh=mesh, tactics=tactics)
    found = collectives(prog)
    assert Counter((c.op.split(".")[-1], ",".join(c.mesh_axes)) for c in found) == EXPECTED[name][strategy]
    param_bytes = sum(a.numel() * 4 for a in args[1:1 + len(params)])
    if strategy in ("data", "zero1", "zero3"):
        # every gradient's bytes once (an all_reduce over 2 devices receives its block, a reduce_scatter and
        # an all_gather half of it each), plus the loss
        assert sum(c.bytes_received_per_device for c in found) == param_bytes + 4
    if strategy == "data":  # the activations halve: no more than the unpartitioned step holds
        assert prog.memory().peak <= prog.memory().unpartitioned_peak


@pytest.mark.parametrize("strategy", ["megatron", "data_megatron"])
def test_block_steps_equal_torch(strategy):
    name, graph, args, params, imported = traced("qkv_blocks")
    tactics, mesh = tp.strategy_tactics(strategy, params, 1)
    prog = slicer.compile(imported, mesh=mesh, tactics=tactics)
    want = [t.detach().numpy() for t in graph(*args)]
    got = prog.run(*[a.detach().numpy() for a in args])
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)
