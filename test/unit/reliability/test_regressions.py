"""Regression tests for the classes of bugs of the reliability issue (each at its root, not one instance).

1. Collectives planned over the axes of an enclosing partitioning loop mixed different members of the loop's
   family (a partial sum inside a loop over z reduced with a reduce-scatter/all-gather over z).
2. Sibling-loop fusion, and forward propagation through multi-result ops, built `slicer.loop`s whose results
   had different types (IRDL binds a variadic's constraint to one type).
3. 0-d tensors as arguments and results.
4. Tactics tiling one dim over different axes were rejected with a misleading divisibility error.
5. `slicer.compile` with no tactics said the module declares no mesh.
7. Shapes too large for the host's memory are refused before running.
Each program is checked against numpy written here, on 1, 2, 4 and 8 devices where it applies.
"""

from pathlib import Path

import numpy as np
import pytest

import slicer

T, R = slicer.Tile, slicer.Replicate
INPUTS = Path(__file__).with_name("Inputs")


def matmul_then(shape_a, shape_b, body: str) -> str:
    m, k = shape_a
    _, n = shape_b
    return f"""
func.func @f(%a: tensor<{m}x{k}xf32>, %b: tensor<{k}x{n}xf32>) -> tensor<{m}x{n}xf32> {{
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<{m}x{n}xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  %c = linalg.matmul ins(%a, %b : tensor<{m}x{k}xf32>, tensor<{k}x{n}xf32>) outs(%f : tensor<{m}x{n}xf32>) ->
      tensor<{m}x{n}xf32>
  %r = linalg.generic {{indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
                       iterator_types =
                           ["parallel", "parallel"]}} ins(%c : tensor<{m}x{n}xf32>) outs(%e : tensor<{m}x{n}xf32>) {{
  ^bb0(%x: f32, %o: f32):
    {body}
  }} -> tensor<{m}x{n}xf32>
  return %r : tensor<{m}x{n}xf32>
}}"""


TANH = "%s = math.tanh %x : f32\n    linalg.yield %s : f32"
IDENTITY = "linalg.yield %x : f32"


@pytest.mark.parametrize("mesh, tactics, shapes", [
    # the case: contraction dim over x and z (two tactics), rows over z, then a nonlinear op
    ({"x": 3, "z": 2}, [T(arg=0, dim=1, axes="x"), T(arg=0, dim=0, axes="z"), T(arg=1, dim=0, axes="z")],
     ((2, 6), (6, 4))),
    ({"x": 2, "z": 2}, [T(arg=0, dim=1, axes="x"), T(arg=0, dim=0, axes="z"), T(arg=1, dim=0, axes="z")],
     ((4, 8), (8, 4))),
    ({"x": 2, "z": 4}, [T(arg=0, dim=1, axes="x"), T(arg=0, dim=0, axes="z"), T(arg=1, dim=1, axes="z")],
     ((8, 6), (6, 8))),
    ({"x": 4, "y": 2}, [T(arg=0, dim=0, axes="y"), T(arg=1, dim=0, axes="x"), T(arg=0, dim=1, axes="x")],
     ((4, 8), (8, 8))),
])
@pytest.mark.parametrize("body", [TANH, IDENTITY], ids=["tanh", "identity"])
# the x=4,y=2 case's tanh is computed whole over y (DegradedStrategy): the class of bug is the reduction's family,
# checked by the answer, whatever the strategy degrades to
@pytest.mark.filterwarnings("ignore::slicer.DegradedStrategy")
def test_partial_sums_inside_loops_are_reduced_within_their_family(mesh, tactics, shapes, body):
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(s).astype(np.float32) for s in shapes)
    prog = slicer.compile(matmul_then(*shapes, body), mesh=slicer.Mesh(**mesh), tactics=tactics)
    expected = a.astype(np.float64) @ b
    expected = np.tanh(expected) if body is TANH else expected
    np.testing.assert_allclose(prog.run(a, b), expected, rtol=1e-5, atol=1e-5)


def test_plans_never_communicate_over_a_loop_axis():
    """The partitioner's plans for values computed in loop bodies use none of the loops' axes."""
    prog = slicer.compile(matmul_then((2, 6), (6, 4), TANH), mesh=slicer.Mesh(x=3, z=2),
                          tactics=[T(arg=0, dim=1, axes="x"), T(arg=0, dim=0, axes="z"), T(arg=1, dim=0, axes="z")])
    reduce = [n for n in prog.graph.nodes if getattr(n, "op", "") == "all_reduce"]
    assert reduce and all(n.step.mesh_axes == ("x",) for n in reduce)
    assert not any(getattr(n, "op", "") in ("all_slice", "reduce_scatter") for n in prog.graph.nodes)


ROW_SUM_AND_TANH = """
func.func @f(%a: tensor<4x6xf32>) -> (tensor<4xf32>, tensor<4x6xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  %s = linalg.reduce ins(%a : tensor<4x6xf32>) outs(%f : tensor<4xf32>) dimensions = [1]
    (%in: f32, %acc: f32) {
      %r = arith.addf %in, %acc : f32
      linalg.yield %r : f32
    }
  %e2 = tensor.empty() : tensor<4x6xf32>
  %t = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]} ins(%a : tensor<4x6xf32>) outs(%e2 : tensor<4x6xf32>)
                           {
  ^bb0(%x: f32, %o: f32):
    %y = math.tanh %x : f32
    linalg.yield %y : f32
  } -> tensor<4x6xf32>
  return %s, %t : tensor<4xf32>, tensor<4x6xf32>
}"""

MAX_AND_ARGMAX = """
func.func @f(%a: tensor<4x6xf32>) -> (tensor<4xf32>, tensor<4xi64>) {
  %ninf = arith.constant -3.0e38 : f32
  %c0 = arith.constant 0 : i64
  %e = tensor.empty() : tensor<4xf32>
  %f = linalg.fill ins(%ninf : f32) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  %ei = tensor.empty() : tensor<4xi64>
  %fi = linalg.fill ins(%c0 : i64) outs(%ei : tensor<4xi64>) -> tensor<4xi64>
  %m:2 = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>,
      affine_map<(i, j) -> (i)>],
                         iterator_types = ["parallel", "reduction"]} ins(%a : tensor<4x6xf32>)
                             outs(%f, %fi : tensor<4xf32>, tensor<4xi64>) {
  ^bb0(%x: f32, %best: f32, %at: i64):
    %j = linalg.index 1 : index
    %ji = arith.index_cast %j : index to i64
    %gt = arith.cmpf ogt, %x, %best : f32
    %nb = arith.select %gt, %x, %best : f32
    %na = arith.select %gt, %ji, %at : i64
    linalg.yield %nb, %na : f32, i64
  } -> (tensor<4xf32>, tensor<4xi64>)
  return %m#0, %m#1 : tensor<4xf32>, tensor<4xi64>
}"""


@pytest.mark.parametrize("n", [1, 2, 4])
def test_sibling_loops_with_different_result_types(n):
    a = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)
    prog = slicer.compile(ROW_SUM_AND_TANH, mesh=slicer.Mesh(x=n), tactics=[T(arg=0, dim=0, axes="x")])
    s, t = prog.run(a)
    np.testing.assert_allclose(s, a.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(t, np.tanh(a), rtol=1e-6, atol=1e-6)  # MLIR and numpy tanh differ by an ulp


@pytest.mark.parametrize("n", [1, 2, 4])
def test_multi_result_op_with_different_result_types(n):
    a = np.random.default_rng(2).standard_normal((4, 6)).astype(np.float32)
    prog = slicer.compile(MAX_AND_ARGMAX, mesh=slicer.Mesh(x=n), tactics=[T(arg=0, dim=0, axes="x")])
    best, at = prog.run(a)
    np.testing.assert_array_equal(best, a.max(axis=1))
    np.testing.assert_array_equal(at, a.argmax(axis=1))


SCALE_BY_TOTAL = (INPUTS / "scale_by_total.mlir").read_text()


@pytest.mark.parametrize("mesh, tactics", [
    ({"x": 1}, []),
    ({"x": 2}, [T(arg=1, dim=0, axes="x")]),
    ({"x": 2, "y": 2}, [T(arg=1, dim=0, axes="x"), T(arg=1, dim=1, axes="y"), R(arg=0)]),
    ({"x": 8}, [T(arg=1, dim=1, axes="x")]),
])
def test_zero_dimensional_arguments_and_results(mesh, tactics):
    rng = np.random.default_rng(3)
    s, b = np.asarray(rng.standard_normal(), np.float32), rng.standard_normal((4, 6)).astype(np.float32)
    # x=8: 6 columns do not divide over 8 devices: padded blocks of 1 (the last two hold none), the total masked
    total, scaled = slicer.compile(SCALE_BY_TOTAL, mesh=slicer.Mesh(**mesh), tactics=tactics).run(s, b)
    assert total.shape == () and scaled.shape == (4, 6)
    np.testing.assert_allclose(total, b.astype(np.float64).sum(), rtol=1e-5)
    np.testing.assert_allclose(scaled, s * b, rtol=1e-6)


def test_zero_dimensional_argument_of_the_wrong_shape_is_a_run_error():
    prog = slicer.compile(SCALE_BY_TOTAL, mesh=slicer.Mesh(x=2), tactics=[T(arg=1, dim=0, axes="x")])
    with pytest.raises(slicer.RunError, match=r"argument #0 of @f must be float32\[\]"):
        prog.run(np.zeros((1,), np.float32), np.zeros((4, 6), np.float32))


@pytest.mark.parametrize("mesh, tactics", [
    ({"x": 2, "z": 2}, [T(arg=0, dim=1, axes="x"), T(arg=1, dim=0, axes="z")]),  # K=6 over x then z
    ({"x": 2, "z": 2}, [T(arg=1, dim=0, axes="z"), T(arg=0, dim=1, axes="x")]),
    ({"x": 3, "z": 2}, [T(arg=0, dim=1, axes="x"), T(arg=1, dim=0, axes="z")]),
])
# x=3,z=2: the matmul is computed whole over z (DegradedStrategy); what is checked is that it is redistributed right
@pytest.mark.filterwarnings("ignore::slicer.DegradedStrategy")
def test_one_contraction_dim_tiled_over_different_axes_is_redistributed(mesh, tactics):
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((2, 6)).astype(np.float32), rng.standard_normal((6, 4)).astype(np.float32)
    prog = slicer.compile(matmul_then((2, 6), (6, 4), IDENTITY), mesh=slicer.Mesh(**mesh), tactics=tactics)
    np.testing.assert_allclose(prog.run(a, b), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def test_compile_without_tactics_runs_replicated():
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((2, 6)).astype(np.float32), rng.standard_normal((6, 4)).astype(np.float32)
    prog = slicer.compile(matmul_then((2, 6), (6, 4), TANH), mesh=slicer.Mesh(x=2))
    assert "no collectives" in prog.explain()
    np.testing.assert_allclose(prog.run(a, b), np.tanh(a.astype(np.float64) @ b), rtol=1e-5, atol=1e-6)


def test_blocks_larger_than_memory_are_refused_before_running():
    huge = matmul_then((200000, 600000), (600000, 400000), IDENTITY)
    prog = slicer.compile(huge, mesh=slicer.Mesh(x=2), tactics=[T(arg=0, dim=0, axes="x")])
    peak, _ = prog.graph.peak_bytes_per_device()
    assert peak >= 4 * 600000 * 400000  # the replicated second operand alone
    a = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (200000, 600000), (0, 0))
    b = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (600000, 400000), (0, 0))
    with pytest.raises(slicer.RunError, match=r"argument #1 of @f \(f32\[600000, 400000\].*per device"):
        prog.run(a, b)
    with pytest.raises(slicer.RunError, match=r"GiB available"):
        prog.run(a, b, ranks=2)


MLP = (Path(__file__).resolve().parents[3] / "examples" / "mlp.mlir").read_text()


@pytest.mark.parametrize("tactics", [
    # the storage tactics (w1 rows, w2 columns over x) before the model tactics: once gave nested loops over x
    "arg0.0=x;arg1.0=x;arg1.1=y;arg2.0=y;arg3.0=y;arg3.1=x",
    "arg0.0=x;arg1.1=y;arg2.0=y;arg3.0=y;arg1.0=x;arg3.1=x",
    "arg1.0=x;arg1.1=y;arg0.0=x;arg3.1=x;arg3.0=y",
    # Megatron plus a result tiled over y after the fact (found by the viz work: nested loops over y)
    "arg0.0=x;arg1.1=y;arg3.0=y;result0.1=y",
])
def test_tactics_on_both_dims_of_a_weight_in_any_order(tactics):
    rng = np.random.default_rng(6)
    x, w1, b1, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((8, 16), (16, 32), (32,), (32, 16)))
    prog = slicer.compile(MLP, mesh=slicer.Mesh(x=2, y=2), tactics=slicer.parse_tactics(tactics))
    expected = np.maximum(x.astype(np.float64) @ w1 + b1, 0) @ w2
    np.testing.assert_allclose(prog.run(x, w1, b1, w2), expected, rtol=1e-5, atol=1e-5)


def test_a_result_tiled_over_an_axis_the_weight_does_not_use():
    """matmul 3x2 . 2x12 on x=4,y=2 with the weight's columns over y and the result's columns over x: a valid
    schedule (12 divides by 2 and by 4) once refused as 'not divisible by 8' (found by the fuzzer)."""
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((3, 2)).astype(np.float32), rng.standard_normal((2, 12)).astype(np.float32)
    prog = slicer.compile(matmul_then((3, 2), (2, 12), IDENTITY), mesh=slicer.Mesh(x=4, y=2),
                          tactics=slicer.parse_tactics("arg1.1=y;result0.1=x"))
    np.testing.assert_allclose(prog.run(a, b), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
