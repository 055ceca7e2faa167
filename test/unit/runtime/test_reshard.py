"""Live resharding planned and run on the simulator (`runtime/state/reshard.py`): the moves' plans between two layouts
of the small stateful step, a common mesh for meshes of another shape, and the errors raised before anything
moves. On MPI ranks: test/mpi/test_reshard_mpi.py."""

from dataclasses import replace

import numpy as np
import pytest
from session_programs import STEP, data, expected

import slicer
from slicer.core.errors import InputError, ResourceError
from slicer.core.mesh import Mesh
from slicer.redistribution import DistType, plan, simulate_blocks
from slicer.runtime.execution.blocks import take_block
from slicer.runtime.state.reshard import Move, Reshard, common_mesh, on_mesh, with_stacks


def program(mesh, w_axes):
    """STEP on `mesh`, the batch split over its first axis, w's rows over `w_axes` (None: as propagated)."""
    tactics = [slicer.Tile(arg="x", dim=0, axes=next(iter(mesh)))]
    if w_axes:
        tactics.append(slicer.Tile(arg="w", dim=0, axes=w_axes))
        tactics.append(slicer.Tile(result=1, dim=0, axes=w_axes))
    return slicer.compile(STEP, mesh=slicer.Mesh(**mesh), tactics=tactics)


@pytest.fixture(scope="module")
def programs():
    return {"x-rep": program({"x": 2}, None), "x-rows": program({"x": 2}, "x"), "y-rows": program({"y": 2}, "y")}


def test_axes_of_two_meshes_are_parts_of_one_axis():
    old, new = Mesh(x=2, y=2), Mesh(x=4)
    common = common_mesh(old, new)
    assert common == Mesh(d=4)
    moved = on_mesh(DistType.of(old, (4, 8), [["y"], ["x"]]), old, common)
    assert moved.dims == (("d:(2)2",), ("d:(1)2",))
    assert on_mesh(DistType.of(new, (4, 8), [["x"], []]), new, common).dims == (("d",), ())
    with pytest.raises(InputError, match="save the session"):
        common_mesh(Mesh(x=2), Mesh(x=4))


def test_a_simulated_session_resharded_keeps_its_state_and_steps_on(programs):
    x, w0 = data()
    outs, w_final = expected(x, w0, 3)
    s = programs["x-rep"].session(state={"w": w0})
    np.testing.assert_allclose(s.step(x), outs[0], rtol=1e-6)
    moves = s.reshard_plan(programs["y-rows"])
    assert [m.name for m in moves.moves] == ["w"] and moves.mesh == Mesh(d=2)
    assert moves.moves[0].plan.reaches_lower_bound and moves.bytes_received_per_device == 0  # a local slice
    assert "w: " in moves.explain() and "lower bound" in moves.explain()
    assert w0.nbytes <= moves.peak_bytes_per_device <= moves.budget_bytes  # the whole w, then its half too
    assert f"predicted peak {moves.peak_bytes_per_device} B" in moves.explain()
    with pytest.raises(ResourceError, match=r"over the budget of 10 B"):
        s.reshard(programs["y-rows"], budget=10)
    s2 = s.reshard(programs["y-rows"])
    assert s2.steps == 1 and s2.resharded is not None
    np.testing.assert_array_equal(s2.state_dict()["w"], w0 * 2)
    np.testing.assert_allclose(s2.step(x), outs[1], rtol=1e-6)
    s3 = s2.reshard(programs["x-rep"])
    np.testing.assert_allclose(s3.step(x), outs[2], rtol=1e-6)
    np.testing.assert_array_equal(s3.state_dict()["w"], w_final)


def test_a_value_the_new_program_needs_and_the_session_lacks_is_refused_before_anything_moves(programs):
    x, w0 = data()
    s = programs["x-rep"].session(state={"w": w0})
    other = programs["x-rows"].session_plan(["w"])
    renamed = replace(other, arg_names=("x", "v"))
    with pytest.raises(InputError, match=r"needs state \['v'\] that the session does not hold"):
        s.reshard(renamed)
    with pytest.raises(InputError, match=r"needs state \['v'\] that the session does not hold"):
        s.preload(renamed)  # refused as the reshard would be, before anything is loaded
    assert s.preload(other) is False  # the simulator holds no loaded programs: only the moves are planned
    np.testing.assert_allclose(s.step(x), x @ w0, rtol=1e-6)  # the session goes on as it was


@pytest.mark.parametrize("old_mesh, old_dims, new_mesh, new_dims", [
    ({"x": 2, "y": 2}, [["y"], ["x"]], {"x": 4}, [["x"], []]),
    ({"x": 4}, [[], ["x"]], {"x": 2, "y": 2}, [["x", "y"], []]),
    ({"x": 2, "y": 2}, [["x"], []], {"a": 2, "b": 2}, [["b"], ["a"]]),
])
def test_a_move_between_meshes_of_another_shape_gives_every_rank_its_new_block(old_mesh, old_dims, new_mesh,
                                                                               new_dims):
    """The plan on the common axis d, run on every device's old block (rank = its linear index on both meshes),
    ends with each device holding its block of the value on the new mesh."""
    old, new = Mesh(**old_mesh), Mesh(**new_mesh)
    value = np.arange(8 * 12, dtype=np.float32).reshape(8, 12)
    src, dst = DistType.of(old, value.shape, old_dims), DistType.of(new, value.shape, new_dims)
    common = common_mesh(old, new)
    move = plan(common, on_mesh(src, old, common), on_mesh(dst, new, common))
    blocks = [take_block(value, src, old, rank) for rank in range(4)]
    moved = simulate_blocks(move, blocks) if move.steps else blocks
    for rank in range(4):
        np.testing.assert_array_equal(moved[rank].reshape(dst.local_shape(new)), take_block(value, dst, new, rank))


def test_values_sharing_a_plan_move_stacked_as_one_and_give_the_same_blocks():
    """Moves of values of one shape and layout run as one stack (their blocks stacked on a new leading dim, the
    plan lifted to it): every device ends with the same blocks as moving each value alone; the stacks respect
    the byte limit, the peak counts the stacked copy, and a budget the stacks exceed runs the moves one by one."""
    mesh = Mesh(x=2)
    src, dst = DistType.of(mesh, (8, 4), [["x"], []]), DistType.of(mesh, (8, 4), [[], ["x"]])
    gather = plan(mesh, DistType.of(mesh, (6,), [["x"]]), DistType.of(mesh, (6,), [[]]))
    shared = plan(mesh, src, dst)
    moves = tuple(Move(f"w{i}", i, i, shared) for i in range(5)) + (Move("b", 5, 5, gather),)
    reshard = with_stacks(Reshard(mesh, moves, ()))
    assert [(s.members, s.plan is not None) for s in reshard.stacks] == [((0, 1, 2, 3, 4), True), ((5,), False)]
    assert "stacked, one collective sequence each: w0, w1, w2, w3, w4" in reshard.explain()
    assert len(with_stacks(Reshard(mesh, moves, ()), limit=2 * shared.src_bytes).stacks) == 4  # 2 + 2 + 1, b
    values = [np.arange(32, dtype=np.float32).reshape(8, 4) * (i + 1) for i in range(5)]
    stack = reshard.stacks[0]
    stacked = [np.stack([take_block(v, src, mesh, rank) for v in values]) for rank in range(2)]
    moved = simulate_blocks(stack.plan, stacked)
    for rank in range(2):
        for k, value in enumerate(values):
            np.testing.assert_array_equal(moved[rank][k], take_block(value, dst, mesh, rank))
    single = reshard.unstacked()
    assert single.peak_bytes_per_device < reshard.peak_bytes_per_device  # the stack's blocks move together
    assert reshard.check_budget(reshard.peak_bytes_per_device).stacks == reshard.stacks
    assert reshard.check_budget(single.peak_bytes_per_device).peak_bytes_per_device <= single.peak_bytes_per_device
    assert single.within(single.peak_bytes_per_device).stacks == ()  # no stack of 2 fits the one-by-one peak
    with pytest.raises(ResourceError, match="over the budget"):
        reshard.check_budget(single.peak_bytes_per_device - 1)
