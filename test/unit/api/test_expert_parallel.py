"""slicer.strategies.expert_parallel on the GShard/Switch MoE of examples/torch/switch_moe.py (top-2, capacity
factor 1.25, dropped tokens, one-hot einsum dispatch and combine, stacked experts [E, D, F], load-balancing
loss): with data parallel on the same axis (dp2ep) an AdamW step equals torch's on the simulator, tokens reach
the experts and come back by one all_to_all each (the experts are never gathered, the combine reduces nothing),
each device holds 1/n of the experts and their state (`explain()` names the dispatches and combines, the memory
report the experts per device); experts the axis does not divide are cut into padded blocks; bad patterns,
meshes and experts of an nn.ModuleList are InvalidTactic. MPI ranks: test/mpi/test_expert_parallel_mpi.py."""

import re

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import slicer  # noqa: E402
from example_modules import load  # noqa: E402
from slicer import strategies as st  # noqa: E402

moe = load("torch/switch_moe.py", "switch_moe")
train = load("torch/train_step.py", "train_step")


@pytest.fixture(scope="module")
def imported():
    model, loss_fn, batch = moe.switch_moe(seed=3)
    optimizer = slicer.AdamW(0.01)
    return model, loss_fn, batch, optimizer, slicer.training_step(model, loss_fn, *batch, optimizer=optimizer)


def dp2ep(step, devices):
    return st.expert_parallel(step, "x", mesh={"x": devices}) + st.data_parallel(step, "x")


def collectives(prog) -> list[tuple[str, str]]:
    """(collective, its 'why' line) of each collective `explain()` lists."""
    return re.findall(r"^\s*\d+\. shard\.(\w+) over \[x\].*\n\s*why: (.*)$", prog.explain(), re.MULTILINE)


@pytest.mark.slow  # the import of the step (the module's fixture) takes ~15 s
def test_expert_parallel_tiles_the_stacked_experts_and_their_state_on_dim_0(imported):
    *_, step = imported
    tactics = st.expert_parallel(step, "x")
    names = ["blocks.0.moe.experts_w1", "blocks.0.moe.experts_w2"]
    state = [f"{kind}.{n}" for n in names for kind in ("exp_avg", "exp_avg_sq")]
    assert tactics == ([slicer.Tile(arg=n, dim=0, axes="x") for n in names + state]
                       + [slicer.Tile(result=n, dim=0, axes="x") for n in names + state])


@pytest.mark.slow
def test_dp2ep_training_step_equals_torch_moves_tokens_by_all_to_all_and_keeps_1_over_n_experts(imported):
    model, loss_fn, batch, optimizer, step = imported
    block = model.blocks[0]
    with torch.no_grad():
        dispatch, _ = block.moe.route(block.norm(batch[0]))
    assert dispatch.sum() < 2 * batch[0].shape[0] * batch[0].shape[1]  # some tokens overflow their expert: dropped
    prog = slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=dp2ep(step, 2))
    loss_error, param_error = train.compare(model, loss_fn, batch, optimizer, prog, steps=2)
    assert loss_error <= 1e-5 and param_error <= 1e-5
    found = collectives(prog)
    kinds = [kind for kind, _ in found]
    # forward: the dispatched tokens go to their experts and the experts' outputs come back, one all_to_all
    # each, before the loss's scalar all_reduces; backward: the outputs' gradient to the experts (once, though
    # both backward einsums read it through their own reshapes), the dispatched tokens' gradient back; the
    # gates' gradient reuses the forward's moved outputs. No reduce_scatter over the experts, no expert weight
    # gathered; the other all_reduce is the replicated parameters' gradients.
    assert kinds[:kinds.index("all_reduce")] == ["all_to_all"] * 2
    assert sorted(kinds) == ["all_reduce"] * 3 + ["all_to_all"] * 4
    dispatch, combine = [why for kind, why in found if kind == "all_to_all"][:2]
    assert "source: result of the tile<1> loop over [x] (tactic Tile(arg='x'" in dispatch  # group-tiled tokens
    assert "(tactic Tile(arg='blocks.0.moe.experts_w1'" in combine.split("source: ")[1]  # the experts' outputs
    memory = prog.memory()
    experts = [b for b in memory.arguments if "experts_w" in b.label]
    assert len(experts) == 6 and all(2 * b.bytes_per_device == b.global_bytes for b in experts)
    assert memory.experts == tuple(f"blocks.0.moe.experts_w{i}: 2 of 4 experts per device" for i in (1, 2))
    section = prog.explain().split("expert parallel:\n")[1].split("propagation:")[0]
    sizes = [int(b) for kind, b in re.findall(r"^\s*\d+\. shard\.(\w+) .*: (\d+) B received", prog.explain(), re.M)
             if kind == "all_to_all"]
    assert f"dispatch (tokens to their experts): 2 all_to_alls, {sizes[0] + sizes[2]} B" in section
    assert f"combine (the experts' outputs back to their tokens): 2 all_to_alls, {sizes[1] + sizes[3]} B" in section
    assert "blocks.0.moe.experts_w2: 2 of 4 experts per device" in section


def megatron_in_experts(step):
    """Experts over x (dp2ep), each expert's hidden units F over y: experts_w1 [E, D, F] on dim 2, w2 [E, F, D]
    on dim 1."""
    return (st.expert_parallel(step, "x", mesh={"x": 2, "y": 2}, hidden_axis="y",
                               hidden={"*.experts_w1": 2, "*.experts_w2": 1})
            + st.data_parallel(step, "x"))


@pytest.mark.slow
def test_megatron_inside_each_expert_tiles_f_over_a_second_axis_and_trains_equal_to_torch(imported):
    """2 x 2: the tokens reach their experts by the same 2 + 2 all_to_alls over x; within an expert the F-tiled
    contractions sum their partial outputs with one all_reduce over y forward and one backward (Megatron's
    column- then row-parallel pair); each device holds a quarter of each expert weight and its state."""
    model, loss_fn, batch, optimizer, step = imported
    tactics = megatron_in_experts(step)
    w1 = [t for t in tactics if t.arg == "exp_avg.blocks.0.moe.experts_w1"]
    assert [(t.dim, t.axes) for t in w1] == [(0, ("x",)), (2, ("y",))]
    prog = slicer.compile(step, mesh=slicer.Mesh(x=2, y=2), tactics=tactics)
    found = re.findall(r"^\s*\d+\. shard\.(\w+) over \[(\w+)\]", prog.explain(), re.MULTILINE)
    assert sorted(f for f in found if f[0] != "all_reduce" or f[1] == "y") == (
        [("all_reduce", "y")] * 2 + [("all_to_all", "x")] * 4)
    loss_error, param_error = train.compare(model, loss_fn, batch, optimizer, prog, steps=2)
    assert loss_error <= 1e-5 and param_error <= 1e-5
    experts = [b for b in prog.memory().arguments if "experts_w" in b.label]
    assert len(experts) == 6 and all(4 * b.bytes_per_device == b.global_bytes for b in experts)


@pytest.mark.slow
def test_experts_the_axis_does_not_divide_are_cut_into_padded_blocks_and_train_equal_to_torch():
    """4 experts (and 3 groups) on 3 devices: blocks of 2, 2 and 0 (padded) experts, still equal to torch."""
    model, loss_fn, batch = moe.switch_moe(seed=4, groups=3)
    optimizer = slicer.AdamW(0.01)
    step = slicer.training_step(model, loss_fn, *batch, optimizer=optimizer)
    prog = slicer.compile(step, mesh=slicer.Mesh(x=3), tactics=dp2ep(step, 3))
    assert "all_to_all" in [kind for kind, _ in collectives(prog)]
    loss_error, param_error = train.compare(model, loss_fn, batch, optimizer, prog, steps=2)
    assert loss_error <= 1e-5 and param_error <= 1e-5


@pytest.mark.slow
def test_bad_expert_patterns_and_meshes_are_clear_errors(imported):
    *_, step = imported
    with pytest.raises(slicer.InvalidTactic, match=r"the experts pattern 'layers\.\*\.experts' matches no "
                                                   r"parameter .*closest"):
        st.expert_parallel(step, "x", experts="layers.*.experts")
    with pytest.raises(slicer.InvalidTactic, match=r"'head.bias' \(shape \[16\]\) is not a stacked expert weight"):
        st.expert_parallel(step, "x", experts="head.*")
    with pytest.raises(slicer.InvalidTactic, match=r"unknown mesh axis 'x'"):
        st.expert_parallel(step, "x", mesh={"y": 2})
    with pytest.raises(slicer.InvalidTactic, match=r"takes both hidden_axis= .* and hidden="):
        st.expert_parallel(step, "x", hidden_axis="y")
    with pytest.raises(slicer.InvalidTactic, match=r"hidden_axis='x' is an axis the experts are spread over"):
        st.expert_parallel(step, "x", hidden_axis="x", hidden={"*": 1})
    with pytest.raises(slicer.InvalidTactic, match=r"hidden dim 0 of 'blocks.0.moe.experts_w1' .* dim 0 indexes"):
        st.expert_parallel(step, "x", hidden_axis="y", hidden={"*": 0})
    with pytest.raises(slicer.InvalidTactic, match=r"no hidden pattern names 'blocks.0.moe.experts_w2'"):
        st.expert_parallel(step, "x", hidden_axis="y", hidden={"*w1": 2})
    with pytest.raises(slicer.InvalidTactic, match=r"the hidden pattern '\*router\*' matches no expert weight"):
        st.expert_parallel(step, "x", hidden_axis="y", hidden={"*router*": 1})


def test_experts_of_a_module_list_are_a_clear_error_saying_to_stack_them():
    """Experts as an nn.ModuleList (`moe.experts.<i>.w1`, each [D, F] on every device) are not stacked weights:
    tiling each on its dim 0 would split inside an expert, so expert_parallel says to stack them."""
    text = """func.func @train_step(%x: tensor<2x4xf32>, %a: tensor<4x4xf32>, %b: tensor<4x4xf32>) -> tensor<2x4xf32> {
      %0 = arith.addf %a, %b : tensor<4x4xf32>
      %e = tensor.empty() : tensor<2x4xf32>
      %1 = linalg.matmul ins(%x, %0 : tensor<2x4xf32>, tensor<4x4xf32>) outs(%e : tensor<2x4xf32>) -> tensor<2x4xf32>
      return %1 : tensor<2x4xf32>
    }"""
    names = ("x", "blocks.0.moe.experts.0.w1.weight", "blocks.0.moe.experts.1.w1.weight")
    step = slicer.ImportedProgram(text, names, 1, (None, None), "train_step", "a ModuleList MoE",
                                  arg_roles=("input", "parameter", "parameter"))
    with pytest.raises(slicer.InvalidTactic, match=r"'blocks\.0\.moe\.experts\.0\.w1\.weight' is a weight of one "
                                                   r"expert of an nn\.ModuleList .*slicer\.training_step\(\.\.\., "
                                                   r"stacked='blocks\.\*\.moe\.experts'\)"):
        st.expert_parallel(step, "x")


@pytest.mark.slow
def test_experts_of_a_module_list_imported_stacked_are_spread_by_index_and_train_equal_to_torch():
    """`form="list"` (an nn.ModuleList of experts, `torch.stack([e(d[i]) ...])`) imported with
    `stacked="blocks.*.moe.experts"`: one argument per weight of an expert, [E, ...] (the members stacked), the
    loop one batched computation; under dp2ep device i holds experts 2i, 2i + 1 of each weight and their state,
    the tokens move by the same 2 + 2 all_to_alls, and two AdamW steps equal torch's (its members stacked)."""
    model, loss_fn, batch = moe.switch_moe(seed=3, form="list")
    optimizer = slicer.AdamW(0.01)
    step = slicer.training_step(model, loss_fn, *batch, optimizer=optimizer, stacked="blocks.*.moe.experts")
    weights = ["blocks.0.moe.experts.w1.weight", "blocks.0.moe.experts.w2.weight"]
    assert [n for n in step.arg_names if "experts" in n] == [*weights, *(f"{kind}.{w}" for w in weights
                                                                         for kind in ("exp_avg", "exp_avg_sq"))]
    shapes = [tuple(step.parameters[step.arg_names.index(w) - step.num_inputs].shape) for w in weights]
    assert shapes == [(4, 32, 16), (4, 16, 32)]  # nn.Linear weights [out, in], one per expert, stacked
    prog = slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=dp2ep(step, 2))
    assert sorted(kind for kind, _ in collectives(prog)) == ["all_reduce"] * 3 + ["all_to_all"] * 4
    loss_error, param_error = train.compare(model, loss_fn, batch, optimizer, prog, steps=2)
    assert loss_error <= 1e-5 and param_error <= 1e-5
    memory = prog.memory()
    experts = [b for b in memory.arguments if ".experts." in b.label]
    assert len(experts) == 6 and all(2 * b.bytes_per_device == b.global_bytes for b in experts)
    assert memory.experts == tuple(f"{w}: 2 of 4 experts per device" for w in weights)


def test_stacked_names_module_lists_of_experts_of_one_kind():
    """`stacked=` naming no ModuleList, or a ModuleList whose experts differ, is a FrontendError."""
    from torch import nn

    class Model(nn.Module):
        def __init__(self, second):
            super().__init__()
            self.experts = nn.ModuleList([nn.Linear(4, 4), second])

    batch = (torch.randn(2, 4),)
    with pytest.raises(slicer.FrontendError, match=r"stacked='moe\.experts' matches no nn\.ModuleList .*closest"):
        slicer.training_step(Model(nn.Linear(4, 4)), lambda m, x: x.sum(), *batch, optimizer=slicer.SGD(0.1),
                             stacked="moe.experts")
    with pytest.raises(slicer.FrontendError, match=r"the experts of experts differ \(experts\.1 is not"):
        slicer.training_step(Model(nn.Linear(4, 3)), lambda m, x: x.sum(), *batch, optimizer=slicer.SGD(0.1),
                             stacked="experts")


@pytest.mark.slow
def test_gather_and_scatter_add_dispatch_with_capacity_trains_equal_to_torch_under_dp2ep():
    """The indexed form of the same layer (`form="gather"`: torch.gather into the capacity slots, scatter_add of
    the gated outputs back, imported as one-hot selects and sums) moves tokens by all_to_all and gathers no
    expert. It is not yet the canonical 2 + 2: the backward of the one-hot gather moves its [G, E, C, D, S + 1]
    selects (one more all_to_all) and reduce_scatters the padded tokens' gradient."""
    model, loss_fn, batch = moe.switch_moe(seed=3, form="gather")
    optimizer = slicer.AdamW(0.01)
    step = slicer.training_step(model, loss_fn, *batch, optimizer=optimizer)
    prog = slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=dp2ep(step, 2))
    loss_error, param_error = train.compare(model, loss_fn, batch, optimizer, prog, steps=2)
    assert loss_error <= 1e-5 and param_error <= 1e-5
    kinds = sorted(kind for kind, _ in collectives(prog))
    assert kinds == ["all_reduce"] * 3 + ["all_to_all"] * 5 + ["reduce_scatter"]
    assert "dispatch (tokens to their experts)" in prog.explain()


@pytest.mark.slow
def test_flat_token_index_select_and_index_add_dispatch_trains_equal_to_torch_under_dp2ep():
    """The flat-token form (`form="index"`: `index_select` of each capacity slot's row of the tokens flattened
    to [G * (S + 1), D], `index_add_` of the gated outputs back; both imported as one-hot selects and sums) runs
    under dp2ep equal to torch with each device holding half the experts. Not the canonical 2 + 2: the one-hot
    over the flat rows compares with the row's iteration index, which no tiling follows, so the tokens are
    all-gathered and the flat rows' sums reduce_scattered (the count is recorded, not a target)."""
    model, loss_fn, batch = moe.switch_moe(seed=3, form="index")
    optimizer = slicer.AdamW(0.01)
    step = slicer.training_step(model, loss_fn, *batch, optimizer=optimizer)
    with pytest.warns(slicer.DegradedStrategy, match="linalg.index"):
        prog = slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=dp2ep(step, 2))
    loss_error, param_error = train.compare(model, loss_fn, batch, optimizer, prog, steps=2)
    assert loss_error <= 1e-5 and param_error <= 1e-5
    kinds = sorted(kind for kind, _ in collectives(prog))
    assert kinds == ["all_gather"] * 2 + ["all_reduce"] * 3 + ["all_to_all"] * 6 + ["reduce_scatter"] * 5
    assert prog.memory().experts == tuple(f"blocks.0.moe.experts_w{i}: 2 of 4 experts per device" for i in (1, 2))

