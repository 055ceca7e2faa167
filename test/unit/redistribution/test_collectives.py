"""Each collective's typing rule, costs and executed semantics on hand-made blocks."""

import numpy as np
import pytest

from slicer.redistribution import (AllGather, AllReduce, AllSlice, AllToAll, DistType, Mesh, Permute, Plan,
                                   ReduceScatter, RedistributionError, simulate)
from slicer.redistribution.synthesis import permute_step
from slicer.redistribution.layout import Layout

M = Mesh(x=2, y=4)
SHAPE = (8, 16)


def T(spec):
    return DistType.parse(spec, SHAPE, M)


def one_step(src, step_cls, *args, dst):
    step = step_cls(*args, T(dst))
    return Plan(M, T(src), T(dst), (step,), "f32")


@pytest.mark.parametrize("src, make, dst, received, live", [
    # local sizes: [[],[]] 128, [[x],[]] 64, [[x,y],[]] 16
    ("[[],[]]", lambda d: AllSlice(0, ("x", "y"), d), "[[x,y],[]]", 0, 128 + 16),
    ("[[x,y],[]]", lambda d: AllGather(0, ("y",), d), "[[x],[]]", 3 * 16, 16 + 64),
    ("[[x,y],[]]", lambda d: AllGather(0, ("x", "y"), d), "[[],[]]", 7 * 16, 16 + 128),
    ("[[x],[y]]", lambda d: AllToAll(1, 0, ("x",), d), "[[],[y,x]]", 16 // 2, 32),
    ("[[x,y],[]]", lambda d: AllToAll(1, 0, ("x", "y"), d), "[[],[x,y]]", 7 * 16 // 8, 32),
    ("[[x],[]] partial=[y]", lambda d: AllReduce(("y",), d), "[[x],[]]", 2 * 3 * 64 // 4, 128),
    ("[[x],[]] partial=[y]", lambda d: ReduceScatter(1, ("y",), d), "[[x],[y]]", 3 * 64 // 4, 64 + 16),
])
def test_rule_costs_and_semantics(src, make, dst, received, live):
    step = make(T(dst))
    assert step.rule(T(src), M) == T(dst)
    p = Plan(M, T(src), T(dst), (step,), "f32")
    assert p.bytes_received_per_device == received * 4
    assert p.peak_bytes_per_device == max(live, T(src).local_size(M)) * 4
    simulate(p)  # every device ends with its target block


def test_permute_rule_and_pairs():
    m = Mesh(x=2, y=2)
    src, dst = DistType.parse("[[x],[y]]", (4, 4), m), DistType.parse("[[y],[x]]", (4, 4), m)
    step = permute_step(Layout.get(m, (4, 4)), src, dst)
    assert step.pairs == ((1, 2), (2, 1)) and step == Permute(((1, 2), (2, 1)), dst)
    p = Plan(m, src, dst, (Permute(step.pairs, dst),), "f32")
    assert list(p.received_bytes_by_device) == [0, 16, 16, 0] and p.reaches_lower_bound
    simulate(p)
    with pytest.raises(RedistributionError, match="not its block"):
        Plan(m, src, dst, (Permute(((1, 3), (3, 1)), dst),), "f32")
    with pytest.raises(RedistributionError, match="local shape"):
        Permute((), DistType.parse("[[x,y],[]]", (4, 4), m)).rule(src, m)
    for pairs in (((1, 2),), ((1, 2), (2, 2)), ((1, 2), (3, 2), (2, 1)), ((1, 1),)):
        with pytest.raises(RedistributionError, match="permutation"):
            Permute(pairs, dst).rule(src, m)
    with pytest.raises(RedistributionError, match="outside the mesh"):
        Permute(((1, 4), (4, 1)), dst).rule(src, m)


@pytest.mark.parametrize("src, step, words", [
    ("[[x],[]]", AllSlice(0, ("x",), T("[[x],[]]")), "already used"),
    ("[[x,y],[]]", AllGather(0, ("x",), T("[[y],[]]")), "not the finest"),
    ("[[x],[]]", AllToAll(0, 0, ("x",), T("[[x],[]]")), "must differ"),
    ("[[x],[]]", AllReduce(("y",), T("[[x],[]]")), "not a partial-sum axis"),
    ("[[x],[]]", AllSlice(3, ("y",), T("[[x],[]]")), "out of range"),
])
def test_ill_typed_steps(src, step, words):
    with pytest.raises(RedistributionError, match=words):
        step.rule(T(src), M)


def test_indivisible_slice_rejected():
    m = Mesh(x=3)
    with pytest.raises(RedistributionError, match="not divisible by 3"):
        AllSlice(0, ("x",), None).rule(DistType.parse("[[]]", (4,), m), m)


def test_interpreter_rejects_wrong_claimed_type():
    with pytest.raises(RedistributionError, match="claims type"):
        Plan(M, T("[[],[]]"), T("[[y],[]]"), (AllSlice(0, ("x",), T("[[y],[]]")),), "f32")
    with pytest.raises(RedistributionError, match="not at the target"):
        Plan(M, T("[[],[]]"), T("[[y],[]]"), (AllSlice(0, ("x",), T("[[x],[]]")),), "f32")
