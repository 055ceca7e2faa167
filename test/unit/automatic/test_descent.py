"""slicer.auto finds the textbook strategies where they are best, and the programs it chooses compute the right
values (run on the simulator, compared with numpy / torch)."""

import numpy as np
import pytest

import slicer
from slicer import Tile
from slicer.automatic import read_sketch
from slicer.automatic.candidates import resolve_fixed
from slicer.tactics import Remat

ROOT_MLP = """
func.func @mlp(%x: tensor<BxDxf32>, %w1: tensor<DxHxf32>, %b1: tensor<Hxf32>, %w2: tensor<HxDxf32>) -> tensor<BxDxf32> {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<BxHxf32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<BxHxf32>) -> tensor<BxHxf32>
  %h = linalg.matmul ins(%x, %w1 : tensor<BxDxf32>, tensor<DxHxf32>) outs(%f1 : tensor<BxHxf32>) -> tensor<BxHxf32>
  %a = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (j)>,
                                        affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]}
      ins(%h, %b1 : tensor<BxHxf32>, tensor<Hxf32>) outs(%e1 : tensor<BxHxf32>) {
  ^bb0(%hv: f32, %bv: f32, %o: f32):
    %s = arith.addf %hv, %bv : f32
    %r = arith.maximumf %s, %zero : f32
    linalg.yield %r : f32
  } -> tensor<BxHxf32>
  %e2 = tensor.empty() : tensor<BxDxf32>
  %f2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<BxDxf32>) -> tensor<BxDxf32>
  %y = linalg.matmul ins(%a, %w2 : tensor<BxHxf32>, tensor<HxDxf32>) outs(%f2 : tensor<BxDxf32>) -> tensor<BxDxf32>
  return %y : tensor<BxDxf32>
}
"""


def adamw_mlp_step(batch: int, width: int, hidden: int):
    """(model, loss_fn, x, y, step): a torch MLP (width -> hidden, tanh, -> width) regressing random targets, and
    its AdamW training step."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("torch_mlir")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(width, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, width))
    x, y = torch.randn(batch, width), torch.randn(batch, width)
    loss_fn = lambda m, x, y: torch.nn.functional.mse_loss(m(x), y)  # noqa: E731
    return model, loss_fn, x, y, slicer.training_step(model, loss_fn, x, y, optimizer=slicer.AdamW(lr=0.01))


def mlp(b: int, d: int, h: int) -> str:
    return ROOT_MLP.replace("B", str(b)).replace("D", str(d)).replace("H", str(h))


def run_mlp(text, mesh, tactics, b, d, h):
    rng = np.random.default_rng(0)
    x, w1, b1, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((b, d), (d, h), (h,), (h, d)))
    prog = slicer.compile(text, mesh=mesh, tactics=tactics)
    out = prog.run(x, w1, b1, w2)
    np.testing.assert_allclose(out, np.maximum(x @ w1 + b1, 0) @ w2, rtol=1e-4, atol=1e-4)
    return prog


def test_data_parallel_for_a_large_batch_and_small_weights():
    text = mlp(1024, 32, 64)
    result = slicer.auto(text, slicer.Mesh(x=2))
    assert result.tactics == (Tile(arg=0, dim=0, axes="x"),)
    assert result.predicted_seconds.total < result.replicated.total
    run_mlp(text, slicer.Mesh(x=2), result.tactics, 1024, 32, 64)


@pytest.mark.slow
def test_megatron_when_the_budget_forbids_replicated_weights_and_the_batch_is_small():
    text = mlp(8, 128, 512)
    free = slicer.auto(text, slicer.Mesh(y=2))
    assert free.memory_bytes > 400_000  # the weights alone are 512 KiB: replicated they do not fit 400 kB
    result = slicer.auto(text, slicer.Mesh(y=2), memory_budget=400_000)
    assert set(result.tactics) >= {Tile(arg=1, dim=1, axes="y"), Tile(arg=3, dim=0, axes="y")}
    assert not any(t.arg == 0 for t in result.tactics)  # the small batch stays whole
    assert result.memory_bytes <= 400_000
    prog = run_mlp(text, slicer.Mesh(y=2), result.tactics, 8, 128, 512)
    assert prog.graph.peak_bytes_per_device()[0] <= 400_000


def test_data_and_megatron_on_2x2():
    text = mlp(256, 128, 512)
    mesh = slicer.Mesh(x=2, y=2)
    result = slicer.auto(text, mesh, memory_budget=520_000)
    tiles = {(t.arg, t.dim): tuple(t.axes) for t in result.tactics}
    data_axes = tiles.get((0, 0))
    assert data_axes is not None and len(data_axes) == 1, result.text()
    model_axis = ({"x", "y"} - set(data_axes)).pop()
    assert model_axis in tiles.get((1, 1), ()) and model_axis in tiles.get((3, 0), ()), result.text()
    prog = run_mlp(text, mesh, result.tactics, 256, 128, 512)
    assert prog.graph.peak_bytes_per_device()[0] <= 520_000


def test_user_tactics_come_first_and_are_completed():
    text = mlp(8, 128, 512)
    mine = (Tile(arg=1, dim=1, axes="y"),)
    result = slicer.auto(text, slicer.Mesh(y=2), tactics=mine, memory_budget=400_000)
    assert result.tactics[:1] == mine and Tile(arg=3, dim=0, axes="y") in result.tactics


def test_a_remat_tactic_fixes_no_argument_of_the_search():
    """A `Remat` among the user's tactics places no value: the search's fixed layouts are the other tactics'
    (resolve_fixed read `tactic.arg`, which a Remat has not: AttributeError; found by mypy)."""
    sketch = read_sketch(mlp(8, 128, 512))
    mine = (Tile(arg=1, dim=1, axes="y"),)
    assert resolve_fixed(sketch, (*mine, Remat(pattern="blocks.*"))) == resolve_fixed(sketch, mine) != {}


def test_text_form_round_trips_and_explain_names_the_runner_up():
    result = slicer.auto(mlp(8, 128, 512), slicer.Mesh(y=2), memory_budget=400_000)
    assert slicer.parse_tactics(result.text()) == result.tactics
    text = result.explain()
    assert "runner-up" in text and "saves" in text and "predicted per run" in text
    p = result.predicted_seconds
    assert p.total == pytest.approx(p.compute + p.exposed) and p.overlapped >= 0


@pytest.mark.slow
def test_fsdp_for_a_training_step_when_the_budget_forbids_replicated_parameters():
    """A large batch (data parallel, not tensor parallel) and AdamW: under a budget data parallelism misses, the
    parameters and their optimizer state are sharded over the data axis too (ZeRO-3)."""
    torch = pytest.importorskip("torch")
    model, loss_fn, x, y, step = adamw_mlp_step(batch=1024, width=256, hidden=256)
    mesh = slicer.Mesh(x=2)
    free = slicer.auto(step, mesh)
    assert Tile(arg="x", dim=0, axes="x") in free.tactics
    assert not any(t.arg in ("x", "y") and t.dim != 0 for t in free.tactics)  # no tensor parallelism
    replicated = [slicer.Replicate(arg=n) for n in step.arg_names[2:]]  # data parallel: every parameter whole
    data = slicer.auto(step, mesh, tactics=[Tile(arg="x", dim=0, axes="x"), *replicated])
    budget = int(data.memory_bytes * 0.97)
    result = slicer.auto(step, mesh, memory_budget=budget)
    tiled = {t.arg for t in result.tactics}
    assert "x" in tiled and {"0.weight", "2.weight"} <= tiled, result.text()
    # ZeRO-3: the parameters and their state sharded over the data axis (on the dim whose compiled program holds
    # less: for these weights dim 1, 3.5 MiB against 4.0 for dim 0), the batch over it on dim 0, nothing else.
    assert all(t.axes == ("x",) for t in result.tactics), result.text()
    assert all(t.dim == 0 for t in result.tactics if t.arg in ("x", "y")), result.text()
    assert result.memory_bytes <= budget
    prog = slicer.compile(step, mesh=mesh, tactics=result.tactics)
    assert prog.graph.peak_bytes_per_device()[0] == result.memory_bytes  # the compiled program's own count
    loss, *new = prog.run(x.numpy(), y.numpy())
    want = loss_fn(model, x, y)
    assert float(loss) == pytest.approx(float(want.detach()), rel=1e-4)
    want.backward()
    results = dict(zip(step.result_names[1:], new))
    grad = model[0].weight.grad.numpy()
    np.testing.assert_allclose(results["exp_avg.0.weight"], 0.1 * grad, rtol=1e-3, atol=1e-7)  # (1 - beta1) g
    torch.optim.AdamW(model.parameters(), lr=0.01).step()
    # The first AdamW step is lr * g / (|g| + eps): 1e-4 is 1% of the step, for gradients near eps.
    np.testing.assert_allclose(results["0.weight"], model[0].weight.detach().numpy(), atol=1e-4)
