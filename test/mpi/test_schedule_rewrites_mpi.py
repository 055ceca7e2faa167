"""The schedule's rewrites on 2 MPI ranks: a Megatron MLP whose second matmul is split in 2 chunks
(slicer-collective-matmul) and data-parallel gradients in one bucket (slicer-bucket-collectives) give the
same bits as the programs without them (on the simulator), and the timelines show the overlap: the first
chunk's all_reduce in flight while the second chunk computes; the bucket started once. Both timed runs share one
job (`launch_each`, as `slicer-plan --calibrate kernels` runs its probes): each program's results are its own."""

from pathlib import Path

import numpy as np
import pytest

import slicer
from slicer.lowering import CollectiveNode, compile_function
from slicer.runtime import launch_each

ROOT = Path(__file__).resolve().parents[2]
GRADS = (ROOT / "test" / "unit" / "spmd" / "test_bucketing.py").read_text()


def compiled(text: str, mesh: dict, tactics: str, **options):
    return slicer.compile(text, mesh=slicer.Mesh(**mesh), tactics=slicer.parse_tactics(tactics), **options)


def split_mlp():
    """A Megatron MLP with its second matmul in 2 chunks, the same without, and inputs."""
    text = (ROOT / "examples" / "mlp.mlir").read_text()
    plain = compiled(text, {"y": 2}, "arg1.1=y;arg3.0=y", collective_matmul="off")
    split = compiled(text, {"y": 2}, "arg1.1=y;arg3.0=y", collective_matmul=2)
    rng = np.random.default_rng(11)
    return split, plain, [rng.standard_normal(s.shape).astype(s.dtype) for s in compile_function(text).inputs]


def bucketed_gradients():
    """test_bucketing.py's data-parallel gradients in one bucket, the same unbucketed, and inputs."""
    text = GRADS[GRADS.index('func.func @grads'):GRADS.index('}"""')] + "}"
    tactics = "arg0.0=x;arg1.0=x;arg2.0=x;arg3.0=x"
    plain = compiled(text, {"x": 2}, tactics, buckets="off")
    bucketed = compiled(text, {"x": 2}, tactics, buckets=8192)
    rng = np.random.default_rng(12)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in ((8, 16), (8, 32), (8, 32), (8, 16))]
    return bucketed, plain, inputs


@pytest.fixture(scope="module")
def runs():
    """Both programs' timed runs on one job of 2 ranks: (program, program without the rewrite, inputs,
    (results, timings)) for the split MLP, then for the bucketed gradients."""
    cases = [split_mlp(), bucketed_gradients()]
    timed = launch_each([(program.graph, inputs, None) for program, _, inputs in cases], 2, timeout=240)
    return [(*case, run) for case, run in zip(cases, timed)]


def test_split_second_matmul_overlaps_its_first_all_reduce(runs):
    split, plain, inputs, ((out,), timings) = runs[0]
    assert out.tobytes() == plain.run(*inputs).tobytes()
    kernels = [n.name for n in split.graph.nodes if not isinstance(n, CollectiveNode)]
    for events in timings.events:
        order = [(e.kind, e.label.split(" ")[0]) for e in events]
        first_start = order.index(("start", "all_reduce"))
        first_wait = order.index(("wait", "all_reduce"))
        assert first_start < order.index(("kernel", kernels[1])) < first_wait


def test_bucketed_gradients_on_two_ranks(runs):
    _, plain, inputs, (outs, timings) = runs[1]
    assert len(outs) == len(plain.graph.result_dists) > 1
    for got, want in zip(outs, plain.run(*inputs)):
        assert got.tobytes() == want.tobytes()
    for events in timings.events:
        assert [e.kind for e in events].count("start") == 1
