"""Kernel extraction: the graph of kernels and collectives, and its JSON form, run by the simulator."""

from pathlib import Path

import numpy as np
import pytest

from slicer.lowering.graph_builder import build_kernel_graph
from slicer.lowering.kernel_graph import CollectiveNode, KernelGraph, KernelNode
from slicer.passes import transform
from slicer.runtime import Simulator

ROOT = Path(__file__).resolve().parents[3]
PIPELINE = "slicer-apply-tactics{mesh=x=2,y=4 tactics=%s},slicer-propagate,slicer-partition"


def partition(module, pipeline: str = "slicer-partition", **options) -> str:
    """`pipeline` (default: slicer-partition) on a copy of `module`; the result's text."""
    return transform(module, pipeline, **options)


def graph_of(example: str, tactics: str) -> tuple[str, KernelGraph]:
    text = (ROOT / "examples" / f"{example}.mlir").read_text()
    return text, build_kernel_graph(partition(text, PIPELINE % tactics))


def test_megatron_is_one_kernel_then_the_partial_sum_resolution(tmp_path, monkeypatch):
    # Objective bytes: on x=2,y=4 the idle axis x halves the all_reduce: the kernel slices its rows by x
    # (using the device coordinate), all_reduce over y, all_gather over x back to a replicated result.
    model = tmp_path / "bytes.json"
    model.write_text('{"objective": "bytes", "latency_s": 3e-5, "bandwidth_bytes_per_s": 2e9}')
    monkeypatch.setenv("SLICER_COST_MODEL", str(model))
    _, graph = graph_of("mlp", "arg1.1=y;arg3.0=y")
    assert [type(n) for n in graph.nodes] == [KernelNode, CollectiveNode, CollectiveNode]
    kernel, reduce, gather = graph.nodes
    assert kernel.needs_coords and kernel.inputs == graph.args
    assert (reduce.op, reduce.step.mesh_axes, reduce.input) == ("all_reduce", ("y",), kernel.outputs[0])
    assert (gather.op, gather.step.mesh_axes, gather.input) == ("all_gather", ("x",), reduce.output)
    assert graph.results == (gather.output,) and graph.result_sources == ("default",)


def test_megatron_on_a_small_array_is_one_all_reduce():
    # Objective time (the default): on this 8x16 output a second step costs more latency than the bytes it
    # saves, so the partial sum is resolved by one all_reduce over y.
    _, graph = graph_of("mlp", "arg1.1=y;arg3.0=y")
    assert [type(n) for n in graph.nodes] == [KernelNode, CollectiveNode]
    kernel, reduce = graph.nodes
    assert (reduce.op, reduce.step.mesh_axes, reduce.input) == ("all_reduce", ("y",), kernel.outputs[0])
    assert graph.results == (reduce.output,)


@pytest.mark.slow
def test_json_round_trip_runs_the_same():
    text, graph = graph_of("mha", "arg0.0=x")
    again = KernelGraph.from_json(graph.to_json())
    assert str(again) == str(graph)
    rng = np.random.default_rng(0)
    from slicer.lowering import compile_function

    reference = compile_function(text)
    inputs = [rng.standard_normal(s.shape).astype(s.dtype) for s in reference.inputs]
    np.testing.assert_allclose(Simulator(again)(*inputs), reference(*inputs), rtol=1e-5, atol=1e-5)


VIEWED_AT_THE_TOP = """
func.func @f(%x: tensor<16x256xf32>, %w1: tensor<256x256xf32>, %w2: tensor<256x256xf32>, %w3: tensor<256x256xf32>)
    -> tensor<16x256xf32> {
  %v2 = tensor.expand_shape %w2 [[0, 1], [2]] output_shape [2, 128, 256] : tensor<256x256xf32> into
      tensor<2x128x256xf32>
  %v3 = tensor.expand_shape %w3 [[0, 1], [2]] output_shape [2, 128, 256] : tensor<256x256xf32> into
      tensor<2x128x256xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<16x256xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<16x256xf32>) -> tensor<16x256xf32>
  %h1 = linalg.matmul ins(%x, %w1 : tensor<16x256xf32>, tensor<256x256xf32>) outs(%f : tensor<16x256xf32>)
      -> tensor<16x256xf32>
  %c2 = tensor.collapse_shape %v2 [[0, 1], [2]] : tensor<2x128x256xf32> into tensor<256x256xf32>
  %h2 = linalg.matmul ins(%h1, %c2 : tensor<16x256xf32>, tensor<256x256xf32>) outs(%f : tensor<16x256xf32>)
      -> tensor<16x256xf32>
  %c3 = tensor.collapse_shape %v3 [[0, 1], [2]] : tensor<2x128x256xf32> into tensor<256x256xf32>
  %h3 = linalg.matmul ins(%h2, %c3 : tensor<16x256xf32>, tensor<256x256xf32>) outs(%f : tensor<16x256xf32>)
      -> tensor<16x256xf32>
  return %h3 : tensor<16x256xf32>
}
"""


def test_an_arguments_all_gather_is_placed_before_the_kernel_reading_it():
    """The weights are viewed per head at the top (as an imported program does) and tiled over 4 devices, which
    the views do not divide, so the partitioner gathers them there. The last one is read only after the
    all_reduce of the second layer: it is gathered after it, not stored from the first kernel on (the peak was
    672 KiB, now 475 KiB). The program's results are unchanged."""
    import warnings

    import slicer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the tiling of w3 stops at its view: that is the point)
        prog = slicer.compile(VIEWED_AT_THE_TOP, mesh=slicer.Mesh(x=4),
                              tactics=slicer.parse_tactics("arg1.1=x;arg2.0=x;arg3.0=x"))
    graph = prog.graph
    order = [n.op if isinstance(n, CollectiveNode) else "kernel" for n in graph.nodes]
    assert order == ["all_gather", "kernel", "all_reduce", "all_gather", "kernel"]
    assert graph.nodes[3].input == graph.args[3]
    assert graph.peak_bytes_per_device()[0] == 475136
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in ((16, 256), (256, 256), (256, 256), (256, 256))]
    np.testing.assert_allclose(Simulator(graph)(*inputs), inputs[0] @ inputs[1] @ inputs[2] @ inputs[3],
                               rtol=1e-4, atol=1e-2)


WIDENED_ACROSS_A_COLLECTIVE = """
#id = affine_map<(i, j) -> (i, j)>
func.func @f(%x: tensor<8x16xbf16>, %w: tensor<16x4xbf16>) -> (tensor<f32>, tensor<8x4xf32>) {
  %zero = arith.constant 0.0 : f32
  %eh = tensor.empty() : tensor<8x16xbf16>
  %half = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<8x16xbf16>) outs(%eh : tensor<8x16xbf16>) {
  ^bb0(%in: bf16, %out: bf16):
    %h = arith.mulf %in, %in : bf16
    linalg.yield %h : bf16
  } -> tensor<8x16xbf16>
  %e = tensor.empty() : tensor<8x16xf32>
  %wide = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%half : tensor<8x16xbf16>) outs(%e : tensor<8x16xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %f = arith.extf %in : bf16 to f32
    linalg.yield %f : f32
  } -> tensor<8x16xf32>
  %es = tensor.empty() : tensor<f32>
  %fs = linalg.fill ins(%zero : f32) outs(%es : tensor<f32>) -> tensor<f32>
  %s = linalg.generic {indexing_maps = [#id, affine_map<(i, j) -> ()>], iterator_types = ["reduction", "reduction"]}
      ins(%wide : tensor<8x16xf32>) outs(%fs : tensor<f32>) {
  ^bb0(%in: f32, %acc: f32):
    %a = arith.addf %acc, %in : f32
    linalg.yield %a : f32
  } -> tensor<f32>
  %ey = tensor.empty() : tensor<8x4xf32>
  %fy = linalg.fill ins(%zero : f32) outs(%ey : tensor<8x4xf32>) -> tensor<8x4xf32>
  %y = linalg.generic {indexing_maps = [affine_map<(i, j, k) -> (i, k)>, affine_map<(i, j, k) -> (k, j)>,
                                        affine_map<(i, j, k) -> ()>, affine_map<(i, j, k) -> (i, j)>],
                       iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%wide, %w, %s : tensor<8x16xf32>, tensor<16x4xbf16>, tensor<f32>) outs(%fy : tensor<8x4xf32>) {
  ^bb0(%a: f32, %b: bf16, %t: f32, %acc: f32):
    %bf = arith.extf %b : bf16 to f32
    %m = arith.mulf %a, %bf : f32
    %sc = arith.mulf %m, %t : f32
    %r = arith.addf %acc, %sc : f32
    linalg.yield %r : f32
  } -> tensor<8x4xf32>
  return %s, %y : tensor<f32>, tensor<8x4xf32>
}
"""


def test_a_widening_is_recomputed_by_the_kernels_that_read_it():
    """A bf16 tensor (computed: x * x) widened in one kernel and read after a collective by another: the first
    kernel returns the bf16 tensor, the second takes it and widens it itself (`graph_builder._rematerialisable`),
    so no kernel stores the f32 copy for another (its contraction can then read bf16); the results equal the
    unpartitioned program's."""
    import ml_dtypes

    import slicer
    from slicer.lowering import compile_function

    pipeline = "slicer-apply-tactics{mesh=x=2 tactics=arg0.0=x},slicer-propagate,slicer-partition"
    graph = build_kernel_graph(partition(WIDENED_ACROSS_A_COLLECTIVE, pipeline))
    kernels = [n for n in graph.nodes if isinstance(n, KernelNode)]
    assert len(kernels) == 2 and any(isinstance(n, CollectiveNode) for n in graph.nodes)
    second = graph.kernels_mlir[graph.kernels_mlir.index(f"@{kernels[1].name}("):]
    signature = second[:second.index("{")]
    assert "4x16xbf16" in signature and "xf32>, %" not in signature.split("->")[0].replace("tensor<f32>", "")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 16)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((16, 4)).astype(ml_dtypes.bfloat16)
    expected = compile_function(WIDENED_ACROSS_A_COLLECTIVE)(x, w)
    tactics = [slicer.Tile(arg=0, dim=0, axes="x")]
    actual = slicer.compile(WIDENED_ACROSS_A_COLLECTIVE, mesh={"x": 2}, tactics=tactics).run(x, w)
    for got, want in zip(actual, expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
