"""Several reshapes of one value needed in another tiling move their source once (slicer.spmd.view_moves): a
transpose computed tiled on dim 1 (its argument's tactic) read through two expand_shapes by ops tiled on dim 0
(earlier tactics) is one all_to_all of the transpose, each expand_shape redone on the moved blocks; a value one
reshape reads moves as the reshape's result, as before. Results equal numpy on 1, 2 and 4 devices."""

import re

import numpy as np
import pytest

import slicer

TWO_VIEWS = """
func.func @f(%a: tensor<8x12xf32>, %b: tensor<12x8x1xf32>, %c: tensor<12x1x8xf32>)
    -> (tensor<12x8x1xf32>, tensor<12x1x8xf32>) {
  %e = tensor.empty() : tensor<12x8xf32>
  %t = linalg.transpose ins(%a : tensor<8x12xf32>) outs(%e : tensor<12x8xf32>) permutation = [1, 0]
  %v1 = tensor.expand_shape %t [[0], [1, 2]] output_shape [12, 8, 1] : tensor<12x8xf32> into tensor<12x8x1xf32>
  %v2 = tensor.expand_shape %t [[0, 1], [2]] output_shape [12, 1, 8] : tensor<12x8xf32> into tensor<12x1x8xf32>
  %s1 = arith.addf %v1, %b : tensor<12x8x1xf32>
  %s2 = arith.mulf %v2, %c : tensor<12x1x8xf32>
  return %s1, %s2 : tensor<12x8x1xf32>, tensor<12x1x8xf32>
}
"""
ONE_VIEW = """
func.func @f(%a: tensor<8x12xf32>, %b: tensor<12x8x1xf32>) -> tensor<12x8x1xf32> {
  %e = tensor.empty() : tensor<12x8xf32>
  %t = linalg.transpose ins(%a : tensor<8x12xf32>) outs(%e : tensor<12x8xf32>) permutation = [1, 0]
  %v1 = tensor.expand_shape %t [[0], [1, 2]] output_shape [12, 8, 1] : tensor<12x8xf32> into tensor<12x8x1xf32>
  %s1 = arith.addf %v1, %b : tensor<12x8x1xf32>
  return %s1 : tensor<12x8x1xf32>
}
"""


def moves(prog) -> list[str]:
    return re.findall(r"shard\.(\w+ over \[x\] \S+ -> \S+)", prog.explain())


def tactics(args: int) -> list:
    """The readers' tactics first (they win), the transposed argument's last."""
    return [slicer.Tile(arg=i, dim=0, axes="x") for i in range(1, args)] + [slicer.Tile(arg=0, dim=0, axes="x")]


@pytest.mark.parametrize("devices", [1, 2, 4])
def test_two_reshapes_of_one_value_move_it_once_and_equal_numpy(devices):
    prog = slicer.compile(TWO_VIEWS, mesh={"x": devices}, tactics=tactics(3))
    if devices == 2:
        assert moves(prog) == ["all_to_all over [x] 12x4 -> 6x8"]  # the transpose's blocks, not each view's
    assert len(moves(prog)) == (devices > 1)
    rng = np.random.default_rng(devices)
    a, b, c = (rng.standard_normal(s, dtype=np.float32) for s in [(8, 12), (12, 8, 1), (12, 1, 8)])
    s1, s2 = prog.run(a, b, c)
    assert np.array_equal(s1, a.T[:, :, None] + b) and np.array_equal(s2, a.T[:, None, :] * c)


def test_one_reshape_of_a_value_moves_as_the_reshape():
    prog = slicer.compile(ONE_VIEW, mesh={"x": 2}, tactics=tactics(2))
    assert moves(prog) == ["all_to_all over [x] 12x4x1 -> 6x8x1"]
    a, b = np.arange(96, dtype=np.float32).reshape(8, 12), np.ones((12, 8, 1), np.float32)
    assert np.array_equal(prog.run(a, b), a.T[:, :, None] + b)
