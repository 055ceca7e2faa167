"""The schedule's rewrites on 2 MPI ranks: a Megatron MLP whose second matmul is split in 2 chunks
(slicer-collective-matmul) and data-parallel gradients in one bucket (slicer-bucket-collectives) give the
same bits as the programs without them (on the simulator), and the timelines show the overlap: the first
chunk's all_reduce in flight while the second chunk computes; the bucket started once."""

from pathlib import Path

import numpy as np

import slicer
from slicer.lowering import CollectiveNode, compile_function

ROOT = Path(__file__).resolve().parents[2]
GRADS = (ROOT / "test" / "unit" / "spmd" / "test_bucketing.py").read_text()


def compiled(text: str, mesh: dict, tactics: str, **options):
    return slicer.compile(text, mesh=slicer.Mesh(**mesh), tactics=slicer.parse_tactics(tactics), **options)


def test_split_second_matmul_overlaps_its_first_all_reduce():
    text = (ROOT / "examples" / "mlp.mlir").read_text()
    plain = compiled(text, {"y": 2}, "arg1.1=y;arg3.0=y", collective_matmul="off")
    split = compiled(text, {"y": 2}, "arg1.1=y;arg3.0=y", collective_matmul=2)
    rng = np.random.default_rng(11)
    inputs = [rng.standard_normal(s.shape).astype(s.dtype) for s in compile_function(text).inputs]
    out, timings = split.run(*inputs, ranks=2, timeout=240, return_timings=True)
    assert out.tobytes() == plain.run(*inputs).tobytes()
    kernels = [n.name for n in split.graph.nodes if not isinstance(n, CollectiveNode)]
    for events in timings.events:
        order = [(e.kind, e.label.split(" ")[0]) for e in events]
        first_start = order.index(("start", "all_reduce"))
        first_wait = order.index(("wait", "all_reduce"))
        assert first_start < order.index(("kernel", kernels[1])) < first_wait


def test_bucketed_gradients_on_two_ranks():
    text = GRADS[GRADS.index('func.func @grads'):GRADS.index('}"""')] + "}"  # test_bucketing.py's program
    tactics = "arg0.0=x;arg1.0=x;arg2.0=x;arg3.0=x"
    plain = compiled(text, {"x": 2}, tactics, buckets="off")
    bucketed = compiled(text, {"x": 2}, tactics, buckets=8192)
    rng = np.random.default_rng(12)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in ((8, 16), (8, 32), (8, 32), (8, 16))]
    outs, timings = bucketed.run(*inputs, ranks=2, timeout=240, return_timings=True)
    for got, want in zip(outs, plain.run(*inputs)):
        assert got.tobytes() == want.tobytes()
    for events in timings.events:
        assert [e.kind for e in events].count("start") == 1
