"""What the ranks measure: each rank's executor holds at most the blocks the kernel graph's liveness says
(Timings.peak_bytes against slicer.viz.memory), and the timeline of a real run renders."""

import json
from pathlib import Path

import numpy as np
import pytest

import slicer
from slicer.viz import chrome_trace, timeline_text

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("mesh,tactics,peak", [
    ({"y": 4}, "arg1.1=y;arg3.0=y", 2080),               # Megatron: x whole, weights in quarters
    ({"x": 2, "y": 2}, "arg0.0=x;arg1.1=y;arg3.0=y", 2624),  # plus data parallel over x
])
def test_the_ranks_measure_the_estimated_peak(mesh, tactics, peak):
    prog = slicer.compile((EXAMPLES / "mlp.mlir").read_text(), mesh=slicer.Mesh(**mesh),
                          tactics=slicer.parse_tactics(tactics))
    rng = np.random.default_rng(1)
    x, w1, b1, w2 = (rng.standard_normal(s).astype(np.float32) for s in [(8, 16), (16, 32), (32,), (32, 16)])
    out, timings = prog.run(x, w1, b1, w2, ranks=4, repeat=2, timeout=240, return_timings=True)
    np.testing.assert_allclose(out, np.maximum(x @ w1 + b1, 0) @ w2, rtol=1e-4, atol=1e-4)
    assert prog.memory().peak == peak
    assert timings.peak_bytes == (peak,) * 4
    assert "(as estimated" in prog.memory(timings).text()
    trace = json.loads(json.dumps(chrome_trace(timings, prog.mesh)))
    assert {e["pid"] for e in trace["traceEvents"]} == {0, 1, 2, 3}
    assert len(timeline_text(timings).splitlines()) == 5
