"""Expert parallel with data parallel on the same axis (dp2ep, slicer.strategies.expert_parallel) on 1, 2 and 4
MPI ranks: two AdamW steps of the GShard/Switch MoE of examples/torch/switch_moe.py (top-2, capacity 1.25, dropped
tokens, load-balancing loss) equal torch eager; the all_to_alls run over MPI. The simulator's checks (collectives,
memory, errors) are in test/unit/api/test_expert_parallel.py."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import slicer  # noqa: E402
from example_modules import collective_ops, load  # noqa: E402
from slicer import strategies as st  # noqa: E402

moe = load("torch/switch_moe.py", "switch_moe")
train = load("torch/train_step.py", "train_step")


@pytest.fixture(scope="module")
def imported():
    model, loss_fn, batch = moe.switch_moe(seed=5, groups=4, seq=8, experts=4)
    optimizer = slicer.AdamW(0.01)
    return model, loss_fn, batch, optimizer, slicer.training_step(model, loss_fn, *batch, optimizer=optimizer)


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_dp2ep_training_steps_equal_torch_on_mpi_ranks(imported, ranks):
    model, loss_fn, batch, optimizer, step = imported
    tactics = st.expert_parallel(step, "x", mesh={"x": ranks}) + st.data_parallel(step, "x")
    prog = slicer.compile(step, mesh=slicer.Mesh(x=ranks), tactics=tactics)
    assert ("shard.all_to_all" in collective_ops(prog)) == (ranks > 1)
    loss_error, param_error = train.compare(model, loss_fn, batch, optimizer, prog, steps=2, ranks=ranks)
    assert loss_error <= 1e-5 and param_error <= 1e-5


@pytest.fixture(scope="module")
def listed():
    model, loss_fn, batch = moe.switch_moe(seed=5, groups=4, seq=8, experts=4, form="list")
    optimizer = slicer.AdamW(0.01)
    step = slicer.training_step(model, loss_fn, *batch, optimizer=optimizer, stacked="blocks.*.moe.experts")
    return model, loss_fn, batch, optimizer, step


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_experts_of_a_module_list_imported_stacked_train_equal_to_torch_on_mpi_ranks(listed, ranks):
    """The ModuleList form (`form="list"`, imported with `stacked=`) under dp2ep: device i holds experts i*E/n to
    (i+1)*E/n - 1; two AdamW steps equal torch's on 1, 2 and 4 ranks."""
    model, loss_fn, batch, optimizer, step = listed
    tactics = st.expert_parallel(step, "x", mesh={"x": ranks}) + st.data_parallel(step, "x")
    prog = slicer.compile(step, mesh=slicer.Mesh(x=ranks), tactics=tactics)
    assert ("shard.all_to_all" in collective_ops(prog)) == (ranks > 1)
    loss_error, param_error = train.compare(model, loss_fn, batch, optimizer, prog, steps=2, ranks=ranks)
    assert loss_error <= 1e-5 and param_error <= 1e-5


@pytest.mark.slow
def test_megatron_inside_each_expert_on_a_2_by_2_mesh_equals_torch_on_4_ranks(imported):
    """Experts (and groups) over x, each expert's hidden units F over y: two AdamW steps on 4 ranks equal torch."""
    model, loss_fn, batch, optimizer, step = imported
    tactics = (st.expert_parallel(step, "x", hidden_axis="y", hidden={"*.experts_w1": 2, "*.experts_w2": 1})
               + st.data_parallel(step, "x"))
    prog = slicer.compile(step, mesh=slicer.Mesh(x=2, y=2), tactics=tactics)
    assert "shard.all_to_all" in collective_ops(prog)
    loss_error, param_error = train.compare(model, loss_fn, batch, optimizer, prog, steps=2, ranks=4)
    assert loss_error <= 1e-5 and param_error <= 1e-5
