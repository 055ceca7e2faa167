"""Synthesis on hand-picked cases: shape of the plans, bounds, determinism, and the benchmark suite."""

import sys
from pathlib import Path

import pytest

from slicer.redistribution import DistType, Mesh, RedistributionError, plan, simulate
from slicer.redistribution.synthesis import naive_plan

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))  # the reshard suite
from plan_gaps import TILES, explain
from reshard_suite import cases


def P(mesh, shape, src, dst, dtype="f32"):
    return plan(mesh, DistType.parse(src, shape, mesh), DistType.parse(dst, shape, mesh), dtype=dtype)


def ops(p):
    return [s.op for s in p.steps]


def test_swap_2x2_is_one_permute_at_the_bound():
    p = P(Mesh(x=2, y=2), (8, 8), "[[x],[y]]", "[[y],[x]]")
    assert ops(p) == ["permute"] and p.reaches_lower_bound
    assert p.steps[0].pairs == ((1, 2), (2, 1))
    assert p.peak_bytes_per_device == 2 * 16 * 4
    simulate(p)


def test_swap_2x4():
    p = P(Mesh(x=2, y=4), (1024, 1024), "[[x],[y]]", "[[y],[x]]")
    assert p.is_normal_form and p.peak_bytes_per_device <= p.memory_bound_bytes
    assert p.bytes_received_per_device < naive_plan(p.mesh, p.src, p.dst).bytes_received_per_device
    # the bound (only half of the devices hold a quarter of their target) needs an irregular exchange
    assert not p.reaches_lower_bound and explain(p) == TILES
    simulate(P(Mesh(x=2, y=4), (8, 16), "[[x],[y]]", "[[y],[x]]"))


@pytest.mark.parametrize("src, dst, expected", [
    ("[[],[]]", "[[x],[y]]", ["all_slice", "all_slice"]),
    ("[[],[]]", "[[x,y],[]]", ["all_slice"]),
    ("[[x,y],[]]", "[[],[]]", ["all_gather"]),
    ("[[x,y],[]]", "[[],[x,y]]", ["all_to_all"]),              # one multi-axis all_to_all
    ("[[x],[]] partial=[y]", "[[x],[y]]", ["reduce_scatter"]),
    ("[[x],[]] partial=[y]", "[[x],[]]", ["all_reduce"]),
    ("[[x],[y]]", "[[x],[y]]", []),
])
def test_expected_shapes(src, dst, expected):
    p = P(Mesh(x=2, y=4), (16, 16), src, dst)
    assert ops(p) == expected
    if "partial" not in src:
        assert p.reaches_lower_bound
    simulate(p)
    if expected and expected[0] == "all_to_all":
        assert p.steps[0].mesh_axes == ("x", "y")


@pytest.mark.parametrize("shape", [(128, 128), (128, 4, 32), (512, 128)])
@pytest.mark.parametrize("axes", ["x,y", "y,x"])
def test_partial_sums_over_two_axes_scatter_in_one_reduce_scatter(shape, axes):
    """Partial over both axes of 2x2, tiled over both on dim 0: one reduce_scatter. The search tried one axis per
    step; two in a row pay the latency twice, so for blocks of tens of KB (FSDP's weight gradients) it chose an
    all_reduce and a local slice, moving twice the bytes of the one reduce_scatter."""
    rest = ",[]" * (len(shape) - 1)
    p = P(Mesh(x=2, y=2), shape, f"[[]{rest}] partial=[x,y]", f"[[{axes}]{rest}]")
    assert ops(p) == ["reduce_scatter"] and p.steps[0].mesh_axes == tuple(axes.split(","))
    simulate(P(Mesh(x=2, y=2), (8,) + shape[1:], f"[[]{rest}] partial=[x,y]", f"[[{axes}]{rest}]"))


def test_size_one_axes_are_relabelled_for_free():
    p = P(Mesh(x=1, y=2), (4, 4), "[[x],[y]]", "[[y],[x]]")
    assert p.bytes_received_total == 0 or p.reaches_lower_bound
    simulate(p)


def test_errors():
    m = Mesh(x=2, y=2)
    with pytest.raises(RedistributionError, match="cannot create partial sums"):
        P(m, (4, 4), "[[x],[]]", "[[x],[]] partial=[y]")
    with pytest.raises(RedistributionError, match="shape"):
        plan(m, DistType.parse("[[x]]", (4,), m), DistType.parse("[[x]]", (8,), m))
    with pytest.raises(RedistributionError, match=r"element type f8E4M3FN is not supported; supported: bf16, f16, f32"):
        P(m, (4, 4), "[[x],[]]", "[[y],[]]", dtype="f8E4M3FN")


def test_bf16_plans_move_half_the_bytes_of_f32():
    """The same plan in bf16 counts 2 bytes per element everywhere f32 counts 4, and runs on bf16 blocks."""
    m = Mesh(x=2, y=2)
    wide, narrow = (P(m, (8, 8), "[[x],[]] partial=[y]", "[[y],[x]]", dtype=t) for t in ("f32", "bf16"))
    assert [s.op for s in narrow.steps] == [s.op for s in wide.steps]
    assert narrow.itemsize == 2 and 2 * narrow.bytes_received_per_device == wide.bytes_received_per_device
    assert 2 * narrow.peak_bytes_per_device == wide.peak_bytes_per_device
    simulate(narrow)


@pytest.mark.parametrize("devices", [4, 8])
def test_suite_beats_naive(devices):
    for case in cases(devices, 1 << 16):
        ours = plan(case.mesh, case.src, case.dst)
        naive = naive_plan(case.mesh, case.src, case.dst)
        assert ours.bytes_received_per_device <= naive.bytes_received_per_device, case.name
        assert ours.bytes_received_total <= naive.bytes_received_total, case.name
        assert ours.peak_bytes_per_device <= naive.peak_bytes_per_device, case.name
        assert ours.is_normal_form and ours.peak_bytes_per_device <= ours.memory_bound_bytes
