"""Memory per device against hand-computed figures (slicer.viz.memory), and the executor's buffer tracking
that measures the same thing on the ranks (slicer.runtime.execution.buffer_tracker)."""

import numpy as np
import pytest
from viz_examples import EXAMPLES, compile_example

import slicer
from slicer.runtime.execution.buffer_tracker import BufferTracker, live_bytes
from slicer.runtime.execution.timings import Timings

F32 = 4
X, W1, B1, W2, Y = 8 * 16 * F32, 16 * 32 * F32, 32 * F32, 32 * 16 * F32, 8 * 16 * F32  # the MLP's arrays


@pytest.mark.parametrize("k", [1, 2, 4])
def test_megatron_mlp_weights_divide_by_the_axis_size(k):
    prog = compile_example("mlp", {"y": k}, "arg1.1=y;arg3.0=y")
    m = prog.memory()
    assert [b.bytes_per_device for b in m.arguments] == [X, W1 // k, B1 // k, W2 // k]
    assert [b.global_bytes for b in m.arguments] == [X, W1, B1, W2]
    assert m.argument_bytes == X + (W1 + B1 + W2) // k
    assert m.result_bytes == Y  # the all_reduce leaves the result whole on every device
    # the peak: every argument block plus kernel_0's output (the partial sums, a whole 8x16 block)
    assert m.peak == X + (W1 + B1 + W2) // k + Y and m.peak_when == "during kernel_0"
    assert m.unpartitioned_peak == X + W1 + B1 + W2 + Y
    assert m.peak == prog.graph.peak_bytes_per_device()[0]  # no collective scratch here
    if k > 1:  # after the kernel only the partial sums and the reduced result are live
        assert m.timeline[-1] == ("all_reduce %4->%5", 2 * Y)


def test_two_dimensional_mlp():
    prog = compile_example("mlp", {"x": 2, "y": 2}, "arg0.0=x;arg1.1=y;arg3.0=y")
    m = prog.memory()
    assert [b.bytes_per_device for b in m.arguments] == [X // 2, W1 // 2, B1 // 2, W2 // 2]
    assert m.result_bytes == Y // 2
    assert m.peak == (X + W1 + B1 + W2) // 2 + Y // 2
    text = m.text()
    assert "argument #1 %w1 (%1)" in text and "1.0 KiB (1024 B) of 2.0 KiB (2048 B) (1/2)" in text
    assert f"unpartitioned {5.1:.1f} KiB ({X + W1 + B1 + W2 + Y} B)" in text
    assert "measured" not in text


def test_reduce_scatter_along_a_later_dim_packs_its_input():
    prog = compile_example("mlp", {"y": 4}, "arg1.1=y;arg3.0=y;result0.1=y")
    m = prog.memory()
    label, during = m.timeline[-1]
    assert label == f"reduce_scatter %4->%5 (+{Y} B scratch)"
    assert during == Y + Y // 4 + Y  # input, output and the packed copy of the input


def test_half_precision_reductions_add_their_f32_buffers():
    text = (EXAMPLES / "mlp.mlir").read_text().replace("f32", "f16")
    prog = slicer.compile(text, mesh=slicer.Mesh(y=4), tactics=slicer.parse_tactics("arg1.1=y;arg3.0=y;result0.1=y"))
    half = Y // 2
    send32, recv32 = 2 * half, 2 * half // 4  # the f32 send buffer is the packed one: no f16 packed copy
    assert prog.memory().timeline[-1][1] == half + half // 4 + send32 + recv32


def test_measured_peaks_are_reported_next_to_the_estimate():
    prog = compile_example("mlp", {"y": 4}, "arg1.1=y;arg3.0=y")
    peak = prog.memory().peak
    timings = Timings(0.001, (), 4, 1, peak_bytes=(peak, peak, peak, peak))
    assert f"held at once: {peak / 1024:.1f} KiB ({peak} B) on every rank (as estimated" in prog.memory(timings).text()
    timings = Timings(0.001, (), 4, 1, peak_bytes=(peak, peak + 64, peak, peak))
    line = prog.memory(timings).measured_text()
    assert f"({peak} B) to" in line and "+64 B vs the estimate" in line
    assert "memory per device" in prog.explain() and "measured" in prog.explain(timings)


def test_the_buffer_tracker_drops_dead_values_and_counts_the_same_as_the_estimate():
    prog = compile_example("mlp", {"x": 2, "y": 2}, "arg0.0=x;arg1.1=y;arg3.0=y")
    g = prog.graph
    tracker = BufferTracker(g)
    env = {name: np.zeros(g.values[name].local_shape, g.values[name].numpy_dtype) for name in g.args}
    tracker.start(env)
    for index, node in enumerate(g.nodes):  # what the executor does, with blocks of the right sizes
        for out in ((node.output,) if hasattr(node, "step") else node.outputs):
            env[out] = np.zeros(g.values[out].local_shape, g.values[out].numpy_dtype)
        tracker.step(index, env)
    assert set(env) == set(g.results)  # everything else was dropped after its last use
    assert tracker.peak == g.peak_bytes_per_device()[0]


def test_the_buffer_tracker_counts_a_block_once_however_its_address_is_learnt():
    """Run after run, with the addresses of the argument blocks remembered and those of kernel outputs given by
    the kernel: a block held under two names (an output passed on unchanged) still counts once, and a block
    that was freed does not lend its remembered address to a new one."""
    prog = compile_example("mlp", {"x": 2, "y": 2}, "arg0.0=x;arg1.1=y;arg3.0=y")
    g = prog.graph
    tracker = BufferTracker(g)
    args = {name: np.zeros(g.values[name].local_shape, g.values[name].numpy_dtype) for name in g.args}
    for _ in range(3):
        env = dict(args)
        tracker.start(env)
        for index, node in enumerate(g.nodes):
            outputs = (node.output,) if hasattr(node, "step") else node.outputs
            arrays = [np.zeros(g.values[out].local_shape, g.values[out].numpy_dtype) for out in outputs]
            env.update(zip(outputs, arrays))
            tracker.step(index, env, [a.__array_interface__["data"][0] for a in arrays])
        assert tracker.peak == g.peak_bytes_per_device()[0]
    block = np.zeros(16, np.float32)
    tracker.start({"%a": block})
    tracker._add("%b", block.reshape(4, 4))  # the same buffer under a second name
    assert tracker.held == 64
    del block
    fresh = {"%c": np.zeros(16, np.float32)}
    tracker.start(fresh)
    assert tracker.held == 64


def test_live_bytes_counts_a_shared_block_once():
    a = np.zeros((4, 4), np.float32)
    assert live_bytes({"%0": a, "%1": a, "%2": np.ones(3, np.int8)}) == 64 + 3


def test_element_types_without_a_numpy_dtype_are_not_estimated():
    text = (EXAMPLES / "mlp.mlir").read_text().replace("f32", "f8E4M3FN")
    prog = slicer.compile(text, mesh=slicer.Mesh(x=2), tactics=slicer.parse_tactics("arg0.0=x"))
    assert "memory per device: not estimated (value %0: element type f8E4M3FN is not supported; supported: bf16" \
        in prog.explain()
    picture = prog.picture("w1").text()
    assert "each device holds one 16x32 block;" in picture  # no byte count, the blocks all the same


def test_bf16_counts_two_bytes_per_element():
    """bf16 is in the table: the memory report and the pictures count half of f32's bytes."""
    progs = {t: slicer.compile((EXAMPLES / "mlp.mlir").read_text().replace("f32", t), mesh=slicer.Mesh(x=2),
                               tactics=slicer.parse_tactics("arg0.0=x")) for t in ("f32", "bf16")}
    assert "peak:          2.3 KiB (2368 B)" in progs["bf16"].explain()
    assert "peak:          4.6 KiB (4736 B)" in progs["f32"].explain()
    assert "each device holds one 16x32 block (1024 B)" in progs["bf16"].picture("w1").text()
