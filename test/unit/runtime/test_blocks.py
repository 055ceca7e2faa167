"""Per-rank inputs: each rank's block equals that block of the global array, read or generated."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slicer.core.errors import InputError
from slicer.redistribution import DistType, Mesh
from slicer.runtime.execution.blocks import random_block, random_global, rank_slices, read_block

CASES = [
    ("x=2,y=2", (8, 6), "[[x],[y]]"),
    ("x=2,y=2", (8, 6), "[[y,x],[]]"),
    ("x=2,y=4", (8, 8), "[[],[x,y]]"),
    ("x=2,y=2,z=2", (4, 4, 2), "[[z],[x],[y]]"),
    ("x=4", (8, 3), "[[],[]]"),
]


@pytest.mark.parametrize("mesh_text,shape,dist_text", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_blocks_are_the_global_arrays_blocks(tmp_path, mesh_text, shape, dist_text, dtype):
    mesh = Mesh.parse(mesh_text)
    dist = DistType.parse(dist_text, shape, mesh)
    full = random_global(7, shape, dtype)
    path = tmp_path / "a.npy"
    np.save(path, full)
    covered = np.zeros(shape, dtype=int)
    for rank in range(mesh.device_count):
        where = rank_slices(mesh, dist, rank)
        np.testing.assert_array_equal(random_block(7, dist, mesh, rank, dtype), full[where])
        np.testing.assert_array_equal(read_block(path, dist, mesh, rank, dtype), full[where])
        covered[where] += 1
    # Every element is held by (number of devices / number of blocks) devices.
    assert covered.min() == covered.max()


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31), n=st.integers(1, 64))
def test_random_values_are_spread_and_deterministic(seed, n):
    a = random_global(seed, (n, 3), np.float64)
    assert np.array_equal(a, random_global(seed, (n, 3), np.float64))
    assert np.all((a >= -1) & (a < 1))
    if n >= 8:
        assert len(np.unique(a)) == a.size


def test_input_errors_name_the_file_and_the_mismatch(tmp_path):
    mesh = Mesh.parse("x=2")
    dist = DistType.parse("[[x],[]]", (4, 2), mesh)
    with pytest.raises(InputError, match="input file '.*missing.npy' does not exist"):
        read_block(tmp_path / "missing.npy", dist, mesh, 0, np.float32)
    np.save(tmp_path / "wrong.npy", np.zeros((4, 3), np.float32))
    with pytest.raises(InputError, match=r"holds float32\[4, 3\], but the program takes float32\[4, 2\]"):
        read_block(tmp_path / "wrong.npy", dist, mesh, 0, np.float32)
    (tmp_path / "junk.npy").write_text("not numpy")
    with pytest.raises(InputError, match="is not a readable .npy file"):
        read_block(tmp_path / "junk.npy", dist, mesh, 0, np.float32)
