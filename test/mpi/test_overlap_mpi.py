"""Collectives overlapped with kernels (the default schedule) give the same bits as collectives waited for
where they stand (`run(..., overlap=False)`), including sums over 4 and 8 ranks; the timeline shows the overlap.
The argument wins over its default in the environment (SLICER_OVERLAP) both ways."""

from pathlib import Path

import numpy as np
import pytest

import slicer
from slicer.lowering import compile_function

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

CASES = [
    ("mha", {"x": 4}, "arg0.0=x"),  # sequence parallel: K and V gathered
    ("mha", {"y": 4}, "arg1.1=y;arg2.1=y;arg3.1=y;arg4.0=y"),  # heads: an all_reduce over 4
    ("mlp", {"x": 2, "y": 4}, "arg0.0=x;arg1.1=y;arg3.0=y"),  # Megatron: a sum over 4
    ("layernorm", {"x": 8}, "arg0.0=x"),
]


@pytest.mark.parametrize("example,mesh,tactics", CASES,
                         ids=[f"{c[0]}-{'x'.join(map(str, c[1].values()))}" for c in CASES])
def test_overlapped_run_is_bit_identical_to_blocking(example, mesh, tactics, monkeypatch):
    text = (EXAMPLES / f"{example}.mlir").read_text()
    prog = slicer.compile(text, mesh=slicer.Mesh(**mesh), tactics=slicer.parse_tactics(tactics))
    reference = compile_function(text)
    rng = np.random.default_rng(7)
    inputs = [rng.standard_normal(s.shape).astype(s.dtype) for s in reference.inputs]
    runs = {}
    monkeypatch.setenv("SLICER_OVERLAP", "1")  # the default the argument overrides
    for overlap in (None, False):
        runs[overlap] = prog.run(*inputs, ranks=prog.mesh.device_count, timeout=240, return_timings=True,
                                 overlap=overlap)
    (overlapped, timings), (blocking, blocking_timings) = runs[None], runs[False]
    np.testing.assert_allclose(overlapped, reference(*inputs), rtol=1e-5, atol=1e-5)
    assert overlapped.tobytes() == blocking.tobytes()
    kinds = [e.kind for e in timings.events[0]]
    collectives = sum(hasattr(n, "step") for n in prog.graph.nodes)
    assert kinds.count("start") == kinds.count("wait") == collectives
    blocking_kinds = [e.kind for e in blocking_timings.events[0]]  # each collective waited for where it starts
    assert all(blocking_kinds[i + 1] == "wait" for i, kind in enumerate(blocking_kinds) if kind == "start")


def test_sequence_parallel_attention_gathers_v_while_computing_scores(monkeypatch):
    text = (EXAMPLES / "mha.mlir").read_text()
    prog = slicer.compile(text, mesh=slicer.Mesh(x=4), tactics=slicer.parse_tactics("arg0.0=x"))
    inputs = [np.ones(prog.graph.values[a].dist.shape, np.float32) for a in prog.graph.args]
    monkeypatch.setenv("SLICER_OVERLAP", "0")  # the argument wins over its default
    monkeypatch.setenv("SLICER_COLLECTIVES", "not-a-strategy")  # never read: the argument is given
    _, timings = prog.run(*inputs, ranks=4, timeout=240, return_timings=True, overlap=True, collectives="shm")
    for events in timings.events:
        order = [(e.kind, e.label.split(" ")[0]) for e in events]
        # the second gather (V) is started before the scores kernel runs and waited for after it
        second_start = [i for i, (kind, what) in enumerate(order) if (kind, what) == ("start", "all_gather")][1]
        scores = order.index(("kernel", "kernel_1"))
        second_wait = [i for i, (kind, what) in enumerate(order) if (kind, what) == ("wait", "all_gather")][1]
        assert second_start < scores < second_wait
    gathers = [s for s in timings.steps if s.kind == "collective"]
    assert gathers[1].overlap > 0
