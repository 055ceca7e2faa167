"""A small stateful program for the session tests: y = x @ w, and w' = 2 w replaces w (named alike)."""

import numpy as np

import slicer

STEP = """
func.func @step(%x: tensor<8x4xf32> {slicer.name = "x"}, %w: tensor<4x4xf32> {slicer.name = "w"})
    -> (tensor<8x4xf32> {slicer.name = "y"}, tensor<4x4xf32> {slicer.name = "w"}) {
  %z = tensor.empty() : tensor<8x4xf32>
  %zero = arith.constant 0.0 : f32
  %f = linalg.fill ins(%zero : f32) outs(%z : tensor<8x4xf32>) -> tensor<8x4xf32>
  %y = linalg.matmul ins(%x, %w : tensor<8x4xf32>, tensor<4x4xf32>) outs(%f : tensor<8x4xf32>) -> tensor<8x4xf32>
  %e = tensor.empty() : tensor<4x4xf32>
  %w2 = linalg.add ins(%w, %w : tensor<4x4xf32>, tensor<4x4xf32>) outs(%e : tensor<4x4xf32>) -> tensor<4x4xf32>
  return %y, %w2 : tensor<8x4xf32>, tensor<4x4xf32>
}
"""


def data():
    rng = np.random.default_rng(0)
    return rng.standard_normal((8, 4)).astype(np.float32), rng.standard_normal((4, 4)).astype(np.float32)


def expected(x, w0, steps):
    """The outputs of `steps` steps and the final w."""
    return [x @ (w0 * 2 ** k) for k in range(steps)], w0 * 2 ** steps


def compiled():
    """STEP on a 1-D mesh of 2, the batch x split over it (w and y's rows stay as propagation lays them out)."""
    return slicer.compile(STEP, mesh=slicer.Mesh(x=2), tactics=[slicer.Tile(arg="x", dim=0, axes="x")])
