"""The search composes its starting points per mesh axis: on a 2x2 mesh under a budget that only data parallelism
over one axis with Megatron over the other meets, it finds that tiling (which the greedy descent, changing one
variable at a time, never visited from data over both axes), and the chosen program computes the module's
values on the simulator."""

import numpy as np
import pytest

import slicer
from slicer import strategies
from slicer.automatic import TacticSearch, read_sketch


def _mlp(torch, rows: int, width: int):
    torch.manual_seed(0)
    model = torch.nn.Sequential()
    model.fc1, model.act, model.fc2 = (torch.nn.Linear(width, 4 * width), torch.nn.GELU("tanh"),
                                       torch.nn.Linear(4 * width, width))
    x = torch.randn(rows, width)
    return model.eval(), x


def mlp_on_2x2():
    """(model, x, program, mesh, by_hand): the 512x128 MLP imported, a 2x2 mesh, and its textbook 2-D strategy
    (data over x, Megatron over y); skips where torch or torch-mlir is missing."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("torch_mlir")
    model, x = _mlp(torch, 512, 128)
    program = slicer.from_torch(model, x)
    by_hand = strategies.data_parallel(program, "x") + strategies.megatron(program, "y", ["*fc1.*"], ["*fc2.weight"])
    return model, x, program, slicer.Mesh(x=2, y=2), by_hand


@pytest.mark.slow
def test_data_over_one_axis_and_megatron_over_the_other_under_a_budget():
    model, x, program, mesh, by_hand = mlp_on_2x2()
    budget = int(slicer.compile(program, mesh=mesh, tactics=by_hand).graph.peak_bytes_per_device()[0] * 1.02)
    data = slicer.compile(program, mesh=mesh, tactics=strategies.data_parallel(program, ("x", "y")))
    assert data.graph.peak_bytes_per_device()[0] > budget  # data over both axes does not fit

    result = slicer.auto(program, mesh, memory_budget=budget)
    tiles = {(t.arg, t.dim): tuple(t.axes) for t in result.tactics}
    data_axes = tiles.get(("input", 0))
    assert data_axes is not None and len(data_axes) == 1, result.text()
    model_axis = ({"x", "y"} - set(data_axes)).pop()
    assert tiles.get(("fc1.weight", 0)) == (model_axis,), result.text()  # columns of fc1 (torch: out x in)
    assert tiles.get(("fc2.weight", 1)) == (model_axis,), result.text()  # rows of fc2
    assert result.memory_bytes <= budget

    prog = slicer.compile(program, mesh=mesh, tactics=result.tactics)
    assert prog.graph.peak_bytes_per_device()[0] <= budget
    out = prog.run(x.numpy())
    out = out[0] if isinstance(out, (tuple, list)) else out
    want = model(x).detach().numpy()
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_composed_starts_pair_distinct_one_axis_patterns():
    """The starting points are 1-D patterns assigned per axis: on 2x2 they include data on one axis with the
    weights sharded on the other."""
    _, _, program, mesh, _ = mlp_on_2x2()
    sketch = read_sketch(program.text, program.entry, program.arg_names, program.result_names)
    search = TacticSearch(sketch, mesh, budget=540_000)
    patterns = search.axis_patterns(list(search.variables))
    assert {} in patterns and len(patterns) >= 3
    names = [g.key for g in search.groups]
    mixed = [s for s in search.composed(list(search.variables))
             if {a for (g, a) in s if names[g] == "input"} and {a for (g, a) in s if names[g] != "input"}
             - {a for (g, a) in s if names[g] == "input"}]
    assert mixed, "no composed start pairs data on one axis with weights on the other"
