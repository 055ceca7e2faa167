"""Collectives overlapped with kernels (the default schedule) give the same bits as collectives waited for
where they stand (`run(..., overlap=False)`), including sums over 4 and 8 ranks; the timeline shows the overlap.
The argument wins over its default in the environment (SLICER_OVERLAP) both ways."""

from pathlib import Path

import numpy as np
import pytest

import slicer
from slicer.lowering import compile_function
from slicer.runtime import RunOptions, launch_each

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

CASES = [
    ("mha", {"x": 4}, "arg0.0=x"),  # sequence parallel: K and V gathered
    ("mha", {"y": 4}, "arg1.1=y;arg2.1=y;arg3.1=y;arg4.0=y"),  # heads: an all_reduce over 4
    ("mlp", {"x": 2, "y": 4}, "arg0.0=x;arg1.1=y;arg3.0=y"),  # Megatron: a sum over 4
    ("layernorm", {"x": 8}, "arg0.0=x"),
]


IDS = [f"{c[0]}-{'x'.join(f'{axis}{size}' for axis, size in c[1].items())}" for c in CASES]


@pytest.fixture(scope="module")
def runs():
    """Every case's program, reference output and inputs, and its two timed runs: the options chosen with
    SLICER_OVERLAP=1 in the environment (the default the argument overrides), without an argument and with
    overlap=False. The runs of a rank count share one job (`launch_each`: 2 jobs, not 2 per case)."""
    cases = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SLICER_OVERLAP", "1")
        chosen = {None: RunOptions.chosen(overlap=None), False: RunOptions.chosen(overlap=False)}
    for name, (example, mesh, tactics) in zip(IDS, CASES):
        text = (EXAMPLES / f"{example}.mlir").read_text()
        prog = slicer.compile(text, mesh=slicer.Mesh(**mesh), tactics=slicer.parse_tactics(tactics))
        reference = compile_function(text)
        rng = np.random.default_rng(7)
        inputs = [rng.standard_normal(s.shape).astype(s.dtype) for s in reference.inputs]
        cases[name] = (prog, reference(*inputs), inputs, {})
    for ranks in sorted({prog.mesh.device_count for prog, *_ in cases.values()}):
        mine = [(name, overlap) for name, (prog, *_) in cases.items() if prog.mesh.device_count == ranks
                for overlap in chosen]
        timed = launch_each([(cases[name][0].graph, cases[name][2], chosen[overlap]) for name, overlap in mine],
                            ranks, timeout=240)
        for (name, overlap), ((result,), timings) in zip(mine, timed):
            cases[name][3][overlap] = (result, timings)
    return cases


@pytest.mark.parametrize("case", IDS)
def test_overlapped_run_is_bit_identical_to_blocking(case, runs):
    prog, expected, _, timed = runs[case]
    (overlapped, timings), (blocking, blocking_timings) = timed[None], timed[False]
    np.testing.assert_allclose(overlapped, expected, rtol=1e-5, atol=1e-5)
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
