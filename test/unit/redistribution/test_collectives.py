"""Each collective's typing rule (both ways), costs, text and IR forms, and executed semantics on hand-made
blocks."""

import numpy as np
import pytest

from slicer.core.errors import MeshError
from slicer.redistribution import (
    STEP_TYPES,
    AllGather,
    AllReduce,
    AllSlice,
    AllToAll,
    DistType,
    Mesh,
    Permute,
    Plan,
    RedistributionError,
    ReduceScatter,
    simulate,
    step_from_fields,
    type_before,
)
from slicer.redistribution.layout import Layout
from slicer.redistribution.steps import STEP_OF_IR, step_with_type
from slicer.redistribution.synthesis import permute_step

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


# -- one owner per collective: the class carries both directions of its rule, its text and IR forms ---------

M3 = Mesh(x=2, y=2, z=2)
SHAPE3 = (8, 16)


def T3(spec):
    return DistType.parse(spec, SHAPE3, M3)


@pytest.mark.parametrize("before, step", [
    ("[[],[]]", AllSlice(0, ("x", "y"), None)),
    ("[[x,y],[]]", AllGather(0, ("y",), None)),
    ("[[x],[y]]", AllToAll(1, 0, ("x",), None)),
    ("[[x,y],[z]]", AllToAll(1, 0, ("x", "y"), None, ("y", "x"))),  # reordering: [z,y,x] on dim 1
    ("[[x],[]] partial=[y]", AllReduce(("y",), None)),
    ("[[x],[]] partial=[y,z]", ReduceScatter(1, ("y", "z"), None)),
])
def test_type_before_inverts_the_rule(before, step):
    after = step.rule(T3(before), M3)
    step = step_with_type(step, after)
    assert type_before(step, after, M3) == T3(before)
    again = step_from_fields(step.op, step.fields(), after)  # the text form round-trips
    assert again == step and type(again) is type(step)


def test_reordering_all_to_all_is_its_own_ir_op():
    plain = AllToAll(1, 0, ("x", "y"), T3("[[],[x,y]]"))
    reordering = AllToAll(1, 0, ("x", "y"), T3("[[],[y,x]]"), ("y", "x"))
    assert plain.ir_op_name() != reordering.ir_op_name()
    assert STEP_OF_IR[reordering.ir_op_name()] is AllToAll and STEP_OF_IR[plain.ir_op_name()] is AllToAll
    assert list(reordering.ir_groups().values()) == [("x", "y"), ("y", "x")]
    read = AllToAll.from_ir(reordering.ir_op_name(), _Written(reordering), reordering.type_after)
    assert read == reordering


class _Written:
    """What an op emitted for `step` holds, read the way `Collective.from_ir` reads an op."""

    def __init__(self, step):
        self.attrs = {**step.ir_dims(), **step.ir_groups(), **step.ir_ints(), **step.ir_reductions()}

    def dim(self, key):
        return self.attrs[key]

    def group(self, key):
        return self.attrs.get(key, ())

    def ints(self, key):
        return self.attrs[key]

    def reduction(self, key):
        return self.attrs.get(key, "sum")


def test_every_step_reads_back_from_its_ir_form():
    cases = [AllReduce(("x",), T3("[[],[]]"), "max"), AllReduce(("x",), T3("[[],[]]")),
             Permute(((0, 1), (1, 0)), T3("[[x],[]]")), AllToAll(1, 0, ("x", "y"), T3("[[],[x,y]]")),
             ReduceScatter(0, ("x",), T3("[[x],[]]"))]
    for step in cases:
        assert type(step).from_ir(step.ir_op_name(), _Written(step), step.type_after) == step


def test_a_permute_has_no_type_before():
    p = Permute(((0, 1), (1, 0)), T3("[[x],[]]"))
    assert type_before(p, p.type_after, M3) is None


def test_registry_lists_every_collective_once():
    assert set(STEP_TYPES.values()) == {AllSlice, AllGather, AllToAll, Permute, AllReduce, ReduceScatter}
    assert all(cls.op == op for op, cls in STEP_TYPES.items())
    assert len({cls.ir_name for cls in STEP_TYPES.values()}) == len(STEP_TYPES)


def test_unknown_mesh_axis_is_a_mesh_error_on_every_path():
    with pytest.raises(MeshError, match="unknown mesh axis 'q'"):
        DistType.parse("[[q],[]]", SHAPE, M)
    with pytest.raises(MeshError, match="unknown mesh axis 'q'"):
        AllGather(0, ("q",), T("[[],[]]")).rule(T("[[x],[]]"), M)
    with pytest.raises(MeshError, match="unknown mesh axis 'q'"):
        M.size("q")
    with pytest.raises(RedistributionError, match="sub-axis") as info:  # a bad part of a known axis is not
        AllGather(0, ("y:(3)2",), T("[[],[]]")).rule(T("[[x],[]]"), M)
    assert not isinstance(info.value, MeshError)


def test_all_reduce_by_maximum():
    """The all_reduce the partitioner emits for a maximum over a tiled dim (log-softmax's): each group's
    blocks combined by maximum; its text form names the reduction (a sum's does not) and reads back."""
    mesh = Mesh(x=2)
    after = DistType.parse("[[]]", (3,), mesh)
    step = AllReduce(("x",), after, reduction="max")
    blocks = [np.array([1.0, -5.0, 2.0], np.float32), np.array([0.5, -4.0, 7.0], np.float32)]
    out = step.numpy_blocks(Layout.get(mesh, (3,)), blocks)
    np.testing.assert_array_equal(out[0], [1.0, -4.0, 7.0])
    np.testing.assert_array_equal(out[1], out[0])
    assert step.fields() == {"mesh_axes": ["x"], "reduction": "max"}
    assert step_from_fields("all_reduce", step.fields(), after) == step
    assert AllReduce(("x",), after).fields() == {"mesh_axes": ["x"]}
    with pytest.raises(RedistributionError, match="unknown reduction 'min'"):
        AllReduce(("x",), after, reduction="min")
