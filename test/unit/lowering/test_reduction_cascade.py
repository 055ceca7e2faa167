"""Sums over outer (non-lane) dims run as a cascade of short sums (`lowering/rows/cascade.py`).

Accuracy against float64, with numpy's pairwise float32 sum (over a contiguous copy, so numpy really sums
pairwise) as the yardstick: one chain of R additions per output element has several times its error
(column sums of 4096 rows: 10-20x), the cascade about as much (torch's `cascade_sum` is the same scheme).
Extents that are not multiples of the block (clipped loops, scalar tails) and sums fused with other ops
under a group's rows are checked for their values too.
"""

import zlib

import numpy as np
import pytest
from test_rows import fused_groups

from slicer.lowering import compile_library


@pytest.fixture
def rng(request) -> np.random.Generator:
    """A generator seeded by the test's own name: its data do not depend on which tests ran before it in the
    same process (a shared generator gave a test other data under another order of tests, and its accuracy
    bound, checked on one draw, failed on some of them)."""
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


def reduction_fn(name: str, shape: tuple[int, ...], reduced: tuple[int, ...], outputs=("addf",)) -> str:
    """A generic summing (or max-reducing, "maximumf") `shape` over the dims `reduced`, one output per kind."""
    dims = [f"d{i}" for i in range(len(shape))]
    kept = [d for i, d in enumerate(dims) if i not in reduced]
    in_t = f"tensor<{'x'.join(map(str, shape))}xf32>"
    out_t = f"tensor<{''.join(f'{s}x' for i, s in enumerate(shape) if i not in reduced)}f32>"
    iterators = ", ".join('"reduction"' if i in reduced else '"parallel"' for i in range(len(shape)))
    out_map = f"affine_map<({', '.join(dims)}) -> ({', '.join(kept)})>"
    inits = {"addf": "0.0", "maximumf": "0xFF800000"}
    lines = [f"func.func @{name}(%x: {in_t}) -> ({', '.join([out_t] * len(outputs))}) {{",
             f"  %e = tensor.empty() : {out_t}"]
    for k, kind in enumerate(outputs):
        lines += [f"  %i{k} = arith.constant {inits[kind]} : f32",
                  f"  %f{k} = linalg.fill ins(%i{k} : f32) outs(%e : {out_t}) -> {out_t}"]
    args = ", ".join(f"%o{k}: f32" for k in range(len(outputs)))
    lines += [f"  %r:{len(outputs)} = linalg.generic {{indexing_maps = [affine_map<({', '.join(dims)}) -> "
              f"({', '.join(dims)})>, "
              f"{', '.join([out_map] * len(outputs))}], iterator_types = [{iterators}]}}",
              f"      ins(%x : {in_t}) outs({', '.join(f'%f{k}' for k in range(len(outputs)))} : "
              f"{', '.join([out_t] * len(outputs))}) {{",
              f"  ^bb0(%v: f32, {args}):"]
    lines += [f"    %s{k} = arith.{kind} %o{k}, %v : f32" for k, kind in enumerate(outputs)]
    lines += [f"    linalg.yield {', '.join(f'%s{k}' for k in range(len(outputs)))} : "
              f"{', '.join(['f32'] * len(outputs))}",
              f"  }} -> ({', '.join([out_t] * len(outputs))})",
              f"  return {', '.join(f'%r#{k}' for k in range(len(outputs)))} : {', '.join([out_t] * len(outputs))}",
              "}"]
    return "\n".join(lines) + "\n"


def pairwise(x: np.ndarray, reduced: tuple[int, ...]) -> np.ndarray:
    """numpy's float32 sum over `reduced`, pairwise (the reduced dims moved last and made contiguous)."""
    kept = [i for i in range(x.ndim) if i not in reduced]
    moved = np.ascontiguousarray(np.transpose(x, kept + list(reduced)))
    return moved.reshape(*moved.shape[: len(kept)], -1).sum(-1)


def relative(got, exact) -> float:
    return float(np.linalg.norm(np.asarray(got, np.float64) - exact) / np.linalg.norm(exact))


@pytest.mark.parametrize("shape,reduced,mean", [
    ((4096, 64), (0,), 1.0),          # column sums: the lane is kept, every row one step of the chain
    ((32, 1024, 64), (1, 2), 1.0),    # whole sums (per sample: 32 of them, less noisy than one): a lane loop's
                                      # partial sum per row, added up over 1024 rows
    ((16, 32, 32, 32), (0, 2, 3), 0.5),  # BatchNorm's statistics over N, H, W per channel
])
def test_long_outer_sums_are_as_accurate_as_a_pairwise_sum(cache_dir, shape, reduced, mean, rng):
    """Errors summed over 8 draws. One chain of additions per output measured 19-21x numpy's error (column
    sums), 9-10x (whole sums), 6.5-7x (BatchNorm's); the cascade 1.36-1.5x, 1.07-1.22x, 1.29-1.36x, which is
    torch float32's (the same 1.36-1.5x, 1.06-1.17x, 1.32-1.37x)."""
    library = compile_library(reduction_fn("total", shape, reduced), cache_dir=cache_dir)
    ours = theirs = 0.0
    for _ in range(8):
        x = (rng.standard_normal(shape) + mean).astype(np.float32)
        exact = x.astype(np.float64).sum(reduced)
        ours += relative(library["total"](x), exact)
        theirs += relative(pairwise(x, reduced), exact)
    assert ours < 1.6 * theirs, ours / theirs


@pytest.mark.parametrize("shape,reduced", [((1000, 37), (0,)), ((4099, 3), (0, 1)), ((5, 3, 300, 20), (0, 2))])
def test_cascades_over_ragged_extents_sum_every_element_once(cache_dir, shape, reduced, rng):
    """Extents that are no multiple of the block of 16 (clipped inner loops) nor of the vector (scalar tails)."""
    library = compile_library(reduction_fn("total", shape, reduced), cache_dir=cache_dir)
    x = rng.standard_normal(shape).astype(np.float32) + 2
    np.testing.assert_allclose(library["total"](x), x.astype(np.float64).sum(reduced), rtol=2e-6)


def test_a_sum_beside_a_max_in_one_op_is_cascaded_and_the_max_exact(cache_dir, rng):
    shape, reduced = (2048, 48), (0,)
    library = compile_library(reduction_fn("both", shape, reduced, ("addf", "maximumf")), cache_dir=cache_dir)
    x = rng.standard_normal(shape).astype(np.float32) + 1
    total, top = library["both"](x)
    exact = x.astype(np.float64).sum(0)
    np.testing.assert_array_equal(top, x.max(0))
    assert relative(total, exact) < 1.6 * relative(pairwise(x, reduced), exact)


MEAN_OVER_ROWS = """
func.func @mean(%x: tensor<8x1024x64xf32>) -> tensor<8xf32> {
  %z = arith.constant 0.0 : f32
  %n = arith.constant 65536.0 : f32
  %e = tensor.empty() : tensor<8xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<8xf32>) -> tensor<8xf32>
  %s = linalg.generic {indexing_maps = [affine_map<(c, r, w) -> (c, r, w)>, affine_map<(c, r, w) -> (c)>],
                       iterator_types = ["parallel", "reduction", "reduction"]}
      ins(%x : tensor<8x1024x64xf32>) outs(%f : tensor<8xf32>) {
  ^bb0(%v: f32, %o: f32):
    %a = arith.addf %o, %v : f32
    linalg.yield %a : f32
  } -> tensor<8xf32>
  %m = linalg.generic {indexing_maps = [affine_map<(c) -> (c)>, affine_map<(c) -> (c)>], iterator_types = ["parallel"]}
      ins(%s : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%v: f32, %o: f32):
    %d = arith.divf %v, %n : f32
    linalg.yield %d : f32
  } -> tensor<8xf32>
  return %m : tensor<8xf32>
}
"""


def test_a_cascade_runs_under_a_fused_groups_rows(cache_dir, rng):
    """The sum over (r, w) and the division fuse over the channel rows; the sum over r is still cascaded."""
    assert fused_groups(MEAN_OVER_ROWS) == ["@__slicer_rows_0: 3 op(s), 1 row dim(s)"]
    mean = compile_library(MEAN_OVER_ROWS, cache_dir=cache_dir)["mean"]
    ours = theirs = 0.0
    for _ in range(8):  # errors summed over 8 draws: one draw's are a rounding or two, 0.6-1.9x numpy's
        x = rng.standard_normal((8, 1024, 64)).astype(np.float32) + 1
        exact = x.astype(np.float64).mean((1, 2))
        ours += relative(mean(x), exact)
        theirs += relative(pairwise(x, (1, 2)) / np.float32(65536), exact)
    assert ours < 1.6 * theirs, ours / theirs


BATCHNORM_MEAN = """
func.func @mean(%x: tensor<{n}x{c}x{h}x{w}xf32>) -> tensor<{c}xf32> {{
  %z = arith.constant 0.0 : f32
  %count = arith.constant {count}.0 : f32
  %e = tensor.empty() : tensor<{c}xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<{c}xf32>) -> tensor<{c}xf32>
  %s = linalg.generic {{indexing_maps = [affine_map<(n, c, h, w) -> (n, c, h, w)>, affine_map<(n, c, h, w) -> (c)>],
                       iterator_types = ["reduction", "parallel", "reduction", "reduction"]}}
      ins(%x : tensor<{n}x{c}x{h}x{w}xf32>) outs(%f : tensor<{c}xf32>) {{
  ^bb0(%v: f32, %o: f32):
    %a = arith.addf %o, %v : f32
    linalg.yield %a : f32
  }} -> tensor<{c}xf32>
  %m = linalg.generic {{indexing_maps = [affine_map<(c) -> (c)>, affine_map<(c) -> (c)>], iterator_types =
      ["parallel"]}}
      ins(%s : tensor<{c}xf32>) outs(%e : tensor<{c}xf32>) {{
  ^bb0(%v: f32, %o: f32):
    %d = arith.divf %v, %count : f32
    linalg.yield %d : f32
  }} -> tensor<{c}xf32>
  return %m : tensor<{c}xf32>
}}
"""


@pytest.mark.parametrize("shape", [
    (2, 8, 16, 16),   # a data-parallel ResNet's first BatchNorm on one of 2 devices: levels [n (2 trips)], [h (16)]
    (4, 8, 16, 16),   # the same on one device
    (3, 4, 40, 12),   # an odd outer level and a clipped inner one (h = 40: loops of 16, 16, 8)
])
def test_batchnorm_statistics_under_channel_rows_sum_every_element_exactly_once(cache_dir, shape, rng):
    """BatchNorm's per-channel mean of an NCHW tensor, the sum fused with the division over the channel rows
    (the op a ResNet's train-mode BatchNorm lowers to). Integers 1..8 (no zeros, every partial sum exact in
    float32, and the count a power of two or exactly divided) make the expected mean exact: one term dropped,
    doubled or left over in a scratch from the previous channel changes it by at least 1 / count."""
    n, c, h, w = shape
    text = BATCHNORM_MEAN.format(n=n, c=c, h=h, w=w, count=n * h * w)
    assert fused_groups(text) == ["@__slicer_rows_0: 3 op(s), 1 row dim(s)"]
    mean = compile_library(text, cache_dir=cache_dir)["mean"]
    for _ in range(3):
        x = rng.integers(1, 9, shape).astype(np.float32)
        np.testing.assert_array_equal(mean(x), (x.astype(np.float64).sum((0, 2, 3)) / (n * h * w)).astype(np.float32))
    x = (rng.standard_normal(shape) + 1).astype(np.float32)
    np.testing.assert_allclose(mean(x), x.astype(np.float64).mean((0, 2, 3)), rtol=2e-6)
