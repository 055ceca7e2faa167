"""Every example x strategy: after tactics and after propagation, the program equals the original
(JIT on random inputs), and propagation gives the loop structure the strategy is known for: how many tile
and sum loops remain, and which compute ops stay outside every loop (a propagation that does nothing leaves
the tactics' loops around bare slices and every op replicated, and fails here)."""

from pathlib import Path

import pytest
from mlir import ir

import slicer
from slicer.checking import check_equivalent
from slicer.core.names import LOOP
from slicer.dialect import LoopOp, SumAction, TileAction, make_context, walk_ops
from slicer.dialect.verifier import verify

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
MESH = {"x": 2, "y": 4}

# (example, strategy, tactics, (tile loops, sum loops) after propagation, compute ops left replicated)
CASES = [
    ("mlp", "data-parallel", "arg0.0=x", (1, 0), []),
    ("mlp", "megatron", "arg1.1=y;arg3.0=y", (0, 1), []),
    ("mlp", "2d", "arg0.0=x;arg1.1=y;arg3.0=y", (1, 1), []),
    ("mha", "heads", "arg1.1=y;arg2.1=y;arg3.1=y;arg4.0=y", (0, 1), []),
    # queries' loop, and K and V computed whole in one fused loop (needed whole by every query block)
    ("mha", "sequence-parallel", "arg0.0=x", (2, 0), []),
    ("mha", "2d-sequence-heads", "arg0.0=x;arg1.1=y;arg2.1=y;arg3.1=y;arg4.0=y", (3, 1), []),
    # the keys' transpose does not depend on the queries: it stays whole
    ("attention", "query-rows", "arg0.0=x", (1, 0), ["linalg.transpose"]),
    ("layernorm", "rows", "arg0.0=x", (1, 0), []),
    # features over y: the mean and the variance are sums over y; the centered values, used by the variance
    # and the output, are computed once in their own tile loop (shared, not copied into each consumer)
    ("layernorm", "features", "arg0.1=y", (2, 2), []),
    ("batch_matmul", "batch", "arg0.0=x", (1, 0), []),
    ("batch_matmul", "batch-and-columns", "arg0.0=x;arg1.2=y", (2, 0), []),
    ("reduction", "rows", "arg0.0=x", (1, 0), []),
    ("reduction", "reduced-dim", "arg0.1=y", (0, 1), []),
    ("reshape", "rows", "arg0.0=x", (1, 0), []),
    ("transpose", "rows", "arg0.0=x", (0, 1), []),
]
CHEAP = ("arith.constant", "tensor.empty", "linalg.fill")  # recomputed anywhere: not counted as replicated


def count_loops(module):
    loops = [LoopOp(op) for op in walk_ops(module, LOOP)]
    return (sum(isinstance(loop.action, TileAction) for loop in loops),
            sum(isinstance(loop.action, SumAction) for loop in loops))


def replicated_compute_ops(module) -> list[str]:
    rows = [line.split() for line in slicer.explain(module).splitlines() if line.startswith("  ")]
    return [row[0] for row in rows if row[0] not in CHEAP and row[1] == "replicated"]


@pytest.mark.parametrize("example,strategy,tactics,expected,replicated", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_tactics_and_propagation_preserve_the_program(example, strategy, tactics, expected, replicated):
    original = (EXAMPLES / f"{example}.mlir").read_text()
    with make_context():
        module = slicer.apply_tactics(ir.Module.parse(original), slicer.parse_tactics(tactics), mesh=MESH)
        check_equivalent(original, str(module), step=f"tactics {tactics}")
        slicer.propagate(module)
        assert verify(module) == []
        check_equivalent(original, str(module), step=f"propagation after {tactics}")
        assert count_loops(module) == expected, slicer.explain(module)
        assert replicated_compute_ops(module) == replicated, slicer.explain(module)


def test_megatron_mlp_ends_with_one_sum_loop_holding_every_op():
    with make_context():
        module = slicer.apply_tactics(ir.Module.parse((EXAMPLES / "mlp.mlir").read_text()),
                                      [slicer.Tile(arg=1, dim=1, axes="y"), slicer.Tile(arg=3, dim=0, axes="y")],
                                      mesh=MESH)
        slicer.propagate(module)
        report = slicer.explain(module)
    for line in report.splitlines()[1:]:
        if "linalg.matmul" in line or "linalg.generic" in line:
            assert "sum over y" in line, report
