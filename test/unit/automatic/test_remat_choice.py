"""The search prices rematerialisation on the program `slicer-remat` rewrites (`automatic/remat_choice.py`): on
a step of twelve blocks (matmul, tanh, residual add; a backward reading each block's matmul and tanh results) whose
activations outweigh its weights, a remat plan costs time (the recomputed matmuls) and lowers the peak, and
under a budget only remat meets the search returns the plan, its `Remat` last, with the layout; without a
budget, or one that does not bind, it adds none."""

import pytest

import slicer
from slicer.automatic import Evaluator, read_sketch, search_tactics
from slicer.automatic.remat_choice import rematerialized

ROWS, BLOCKS = 1024, 12
ID = "affine_map<(i, j) -> (i, j)>"


def _generic(result: str, inputs: list[str], body: str, loc: str = "") -> str:
    types = ", ".join(f"tensor<{ROWS}x8xf32>" for _ in inputs)
    args = ", ".join(f"%v{i}: f32" for i in range(len(inputs)))
    maps = ", ".join([ID] * (len(inputs) + 1))
    return (f"    {result} = linalg.generic {{indexing_maps = [{maps}], "
            f"iterator_types = [\"parallel\", \"parallel\"]}} ins({', '.join(inputs)} : {types}) "
            f"outs(%e : tensor<{ROWS}x8xf32>) {{\n"
            f"    ^bb0({args}, %o: f32):\n      {body}\n    }} -> tensor<{ROWS}x8xf32>{loc}\n")


def step() -> str:
    """`BLOCKS` blocks h = tanh(h @ w) + h, the loss h, and a backward d = d * t_i * a_i per block."""
    t = f"tensor<{ROWS}x8xf32>"
    weights = ", ".join(f"%w{i}: tensor<8x8xf32>" for i in range(BLOCKS))
    lines = [f"func.func @step(%x: {t}, {weights}, %g: {t}) -> ({t} {{slicer.name = \"loss\"}}, {t}) {{\n",
             "    %cst = arith.constant 0.000000e+00 : f32\n", f"    %e = tensor.empty() : {t}\n",
             f"    %z = linalg.fill ins(%cst : f32) outs(%e : {t}) -> {t}\n"]
    h = "%x"
    for i in range(BLOCKS):
        lines.append(f"    %a{i} = linalg.matmul ins({h}, %w{i} : {t}, tensor<8x8xf32>) outs(%z : {t}) -> {t} "
                     f"loc(\"module:blocks.{i}.fc\")\n")
        lines.append(_generic(f"%t{i}", [f"%a{i}"], "%r = math.tanh %v0 : f32\n      linalg.yield %r : f32",
                              f" loc(\"module:blocks.{i}.act\")"))
        lines.append(_generic(f"%h{i}", [f"%t{i}", h], "%r = arith.addf %v0, %v1 : f32\n      linalg.yield %r : f32",
                              f" loc(\"module:blocks.{i}\")"))
        h = f"%h{i}"
    d = "%g"
    for i in reversed(range(BLOCKS)):
        lines.append(_generic(f"%d{i}", [d, f"%t{i}", f"%a{i}"], "%p = arith.mulf %v0, %v1 : f32\n      "
                              "%r = arith.mulf %p, %v2 : f32\n      linalg.yield %r : f32"))
        d = f"%d{i}"
    lines.append(f"    return {h}, {d} : {t}, {t}\n}}\n")
    return "".join(lines)


PLANS = [slicer.Remat(pattern="blocks.*", policy=p) for p in ("save_dots", "full")]


def priced(text: str):
    return Evaluator(read_sketch(text), slicer.Mesh(x=1)).evaluate(())


@pytest.fixture(scope="module")
def program():
    return step()


def test_a_plan_is_priced_on_the_program_it_rewrites(program):
    none = priced(program)
    dots, full = (priced(rematerialized(program, plan)) for plan in PLANS)
    assert max(dots.peak_bytes, full.peak_bytes) < none.peak_bytes
    assert none.compute < dots.compute < full.compute  # save_dots recomputes the tanh, full the matmuls too


def test_the_search_chooses_remat_only_when_the_budget_requires_it(program):
    none = priced(program)
    peaks = [priced(rematerialized(program, plan)).peak_bytes for plan in PLANS]
    mesh = slicer.Mesh(x=1)
    budget = (none.peak_bytes + max(peaks)) // 2
    found = search_tactics(program, mesh, memory_budget=budget, remat_plans=PLANS)
    assert isinstance(found.tactics[-1], slicer.Remat) and found.memory_bytes <= budget
    assert "without remat no partitioning found fits" in found.explain()
    for budget in (None, none.peak_bytes * 2):
        found = search_tactics(program, mesh, memory_budget=budget, remat_plans=PLANS)
        assert not any(isinstance(t, slicer.Remat) for t in found.tactics) and not found.why_remat
    with pytest.raises(slicer.AutoError, match="no partitioning found fits"):
        search_tactics(program, mesh, memory_budget=min(peaks) // 2, remat_plans=PLANS)
