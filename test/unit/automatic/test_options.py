"""Bad inputs to slicer.auto are AutoErrors that say what to give instead; budgets parse with their units."""

import pytest

import slicer
from slicer.automatic.options import parse_budget
from slicer.core.errors import AutoError

PROGRAM = """
func.func @f(%x: tensor<8x16xf32>, %w: tensor<16x16xf32>) -> tensor<8x16xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x16xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<8x16xf32>) -> tensor<8x16xf32>
  %y = linalg.matmul ins(%x, %w : tensor<8x16xf32>, tensor<16x16xf32>) outs(%f : tensor<8x16xf32>) -> tensor<8x16xf32>
  return %y : tensor<8x16xf32>
}
"""


@pytest.mark.parametrize("text, expected", [("2GiB", 2 * 2 ** 30), ("512MiB", 512 * 2 ** 20), ("1.5GB", 1_500_000_000),
                                            ("4096", 4096), (" 10 kib ", 10240), (1e6, 1_000_000), (None, None)])
def test_budgets_parse(text, expected):
    assert parse_budget(text) == expected


@pytest.mark.parametrize("budget", ["2 parsecs", "GiB", "-5MiB", 0, -1, True, [1], "nan"])
def test_bad_budgets(budget):
    with pytest.raises(AutoError, match="budget"):
        slicer.auto(PROGRAM, slicer.Mesh(x=2), memory_budget=budget)


@pytest.mark.parametrize("mesh", ["x=two", {"x": 0}, 3, "x"])
def test_bad_meshes(mesh):
    with pytest.raises(AutoError, match="mesh"):
        slicer.auto(PROGRAM, mesh)


def test_bad_objective():
    with pytest.raises(AutoError, match="objective 'speed'"):
        slicer.auto(PROGRAM, slicer.Mesh(x=2), objective="speed")


def test_infeasible_budget_names_the_smallest_memory_found():
    with pytest.raises(AutoError, match=r"smallest peak found is .* bytes, with .*\); raise the budget"):
        slicer.auto(PROGRAM, "x=2", memory_budget=100)


def test_user_tactic_on_an_unknown_axis():
    with pytest.raises(slicer.CompileError, match="axis 'z'"):
        slicer.auto(PROGRAM, "x=2", tactics=[slicer.Tile(arg=0, dim=0, axes="z")])


def test_objective_memory_takes_the_smallest_peak():
    fast = slicer.auto(PROGRAM, "x=2")
    small = slicer.auto(PROGRAM, "x=2", objective="memory")
    assert small.memory_bytes <= fast.memory_bytes
