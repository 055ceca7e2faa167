"""Plans for families of arrays: `plan(..., frozen=axes)` never communicates over the frozen axes.

Inside a partitioning loop over axis z, devices that differ on z hold *different* arrays (members of the
loop's family). A redistribution of such a value must stay within each group of devices with equal z
coordinates. Random meshes (2-3 axes), random frozen subsets, random source/target types over the other
axes: every step's mesh axes avoid the frozen ones, every permute pair joins devices with equal frozen
coordinates, and simulating with a different array per frozen coordinate gives every device the target
block of its own member.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slicer.redistribution import DistType, Mesh, Permute, RedistributionError, plan
from slicer.redistribution.layout import Layout
from slicer.redistribution.numpy_semantics import block_slices, groups, initial_blocks, simulate_blocks


@st.composite
def family_problems(draw):
    names = ["x", "y", "z"][:draw(st.integers(2, 3))]
    mesh = Mesh([(a, draw(st.integers(1, 4))) for a in names])
    frozen = tuple(a for a in names if draw(st.booleans()))
    free = [a for a in names if a not in frozen]
    rank = draw(st.integers(1, 3))

    def placement(allow_partial):
        dims, partial = [[] for _ in range(rank)], []
        for a in draw(st.permutations(free)):
            where = draw(st.integers(-2 if allow_partial else -1, rank - 1))
            if where >= 0:
                dims[where].append(a)
            elif where == -2:
                partial.append(a)
        return dims, partial

    sd, sp = placement(True)
    dd, _ = placement(False)
    dp = [a for a in sp if not any(a in d for d in dd) and draw(st.booleans())]
    shape = []
    for a, b in zip(sd, dd):
        ka, kb = mesh.group_size(a), mesh.group_size(b)
        shape.append(ka * kb // int(np.gcd(ka, kb)) * draw(st.sampled_from([1, 2])))
    return mesh, frozen, DistType.of(mesh, shape, sd, sp), DistType.of(mesh, shape, dd, dp)


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(family_problems())
@pytest.mark.slow
def test_plans_stay_within_each_member(problem):
    mesh, frozen, src, dst = problem
    p = plan(mesh, src, dst, frozen=frozen)
    coords = np.array([mesh.coords(r) for r in range(mesh.device_count)])
    fixed = [mesh.axis_index(a) for a in frozen]
    for step in p.steps:
        assert not set(getattr(step, "mesh_axes", ())) & set(frozen), step
        if isinstance(step, Permute) and step.pairs:
            pairs = step.pair_array
            assert (coords[pairs[:, 0]][:, fixed] == coords[pairs[:, 1]][:, fixed]).all(), step
    # One distinct array per frozen coordinate; each device starts with the blocks of its own member.
    layout = Layout.get(mesh, src.shape)
    member = layout.group_index(frozen) if frozen else np.zeros(mesh.device_count, np.int64)
    size = int(np.prod(src.shape))
    arrays = {int(m): (np.arange(size) * (3 + int(m)) % 1009).astype(np.float64).reshape(src.shape)
              for m in np.unique(member)}
    per_member = {m: initial_blocks(mesh, src, a) for m, a in arrays.items()}
    blocks = simulate_blocks(p, [per_member[int(member[r])][r] for r in range(mesh.device_count)])
    if mesh.group_size(dst.partial) > 1:
        for row in groups(layout, dst.partial):
            target = arrays[int(member[row[0]])][block_slices(layout, dst, int(row[0]))]
            np.testing.assert_array_equal(np.sum([blocks[r] for r in row], axis=0), target)
    else:
        for r in range(mesh.device_count):
            np.testing.assert_array_equal(blocks[r], arrays[int(member[r])][block_slices(layout, dst, r)])


def test_a_type_over_a_frozen_axis_is_refused():
    mesh = Mesh(x=2, z=2)
    src = DistType.of(mesh, (4, 4), (("z",), ()), ())
    with pytest.raises(RedistributionError, match="uses mesh axis 'z', along which devices hold different arrays"):
        plan(mesh, src, DistType.of(mesh, (4, 4), ((), ()), ()), frozen=("z",))
