"""A training step's forward cut into pipeline stages at module boundaries (`frontends/stage_split.py`): each
stage's graph reads its own parameters and the values earlier stages send it, the last stage computes the loss,
and split points that name no module, repeat one, leave a stage empty or share a weight between stages are
refused saying what to change."""

import pytest

torch = pytest.importorskip("torch")

from example_modules import load  # noqa: E402
from slicer.core.errors import FrontendError  # noqa: E402
from slicer.frontends.stage_split import split_forward, split_points  # noqa: E402

train_step = load("torch/train_step.py", "train_step")


def _split(model, loss_fn, batch, points):
    owned = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    names = [*owned, *(f"batch{i}" for i in range(len(batch)))]
    values = [t.detach() for t in owned.values()] + list(batch)
    return split_forward(torch, model, loss_fn, names, values, len(owned), split_points(model, points, None))


@pytest.mark.slow
def test_a_gpt_cut_in_three_reads_its_own_weights_and_sends_the_hidden_state():
    model, loss_fn, batch = train_step.gpt(n_layer=3)
    graphs = _split(model, loss_fn, batch, ["blocks.1", "blocks.2"])
    assert [g.outputs for g in graphs] == [("s0.0",), ("s1.0",), ("loss",)]
    assert "wte.weight" in graphs[0].inputs and "lm_head.weight" in graphs[2].inputs
    assert {n.split(".")[1] for n in graphs[1].inputs if n.startswith("blocks.")} == {"1"}
    assert graphs[1].inputs[0] == "s0.0" and "batch1" in graphs[2].inputs  # the targets, read by the loss
    with torch.no_grad():
        values = {**dict(model.named_parameters()), **dict(model.named_buffers()),
                  "batch0": batch[0], "batch1": batch[1]}
        for graph in graphs:
            out = graph.module(*(values[n] for n in graph.inputs))
            values.update(zip(graph.outputs, out if isinstance(out, (tuple, list)) else (out,)))
        assert torch.allclose(values["loss"], loss_fn(model, *batch))


def test_a_weight_read_by_two_stages_is_refused():
    model, loss_fn, batch = train_step.gpt(n_layer=2)
    model.lm_head.weight = model.wte.weight  # tied
    with pytest.raises(FrontendError, match="wte.weight is read by stages"):
        _split(model, loss_fn, batch, ["blocks.1"])


@pytest.mark.parametrize("points,message", [(["blocks.9"], "names no module"), (["blocks.1", "blocks.1"], "repeat"),
                                            ([], "non-empty"), (["blocks.1", "blocks.0"], "follow the order")])
def test_bad_split_points_say_what_to_change(points, message):
    model, loss_fn, batch = train_step.gpt(n_layer=2)
    with pytest.raises(FrontendError, match=message):
        _split(model, loss_fn, batch, points)


@pytest.mark.slow
def test_stages_n_cuts_a_gpt_where_the_blocks_balance():
    from slicer.frontends.stage_balance import balanced_split, unit_costs

    model, loss_fn, batch = train_step.gpt(n_layer=12)
    costs = unit_costs(torch, model, loss_fn, batch)
    assert [n for n, _ in costs][:3] == ["wte", "wpe", "blocks.0"] and costs[-1][0] == "lm_head"
    assert balanced_split(costs, 4) == ["blocks.3", "blocks.6", "blocks.9"]
    assert balanced_split([("a", 1), ("b", 5), ("c", 1), ("d", 1)], 2) == ["c"]
    with pytest.raises(FrontendError, match="only 4 top-level modules"):
        balanced_split([("a", 1), ("b", 5), ("c", 1), ("d", 1)], 5)
