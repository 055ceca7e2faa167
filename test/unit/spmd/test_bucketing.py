"""Gradient bucketing: the bucket size the cost model gives, which all_reduces share a bucket, and that a
bucketed program computes the same bits."""

from pathlib import Path

import numpy as np
import pytest
from mlir import ir

import slicer
from slicer.core.environment import BUCKETS
from slicer.core.errors import OptionError
from slicer.dialect import make_context
from slicer.lowering import CollectiveNode
from slicer.redistribution import CostModel
from slicer.spmd.bucketing import MAX_BUCKET, MIN_BUCKET, bucket_bytes, bucket_setting, plan_buckets

STEP = (Path(__file__).resolve().parents[2] / "Transforms" / "slicer-bucket-collectives.mlir").read_text()
STEP = STEP.split("// -----")[0]
EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "mlp.mlir"


def sizes_of(cap: int) -> list[list[tuple]]:
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(STEP)
        block = module.body.operations[1].regions[0].blocks[0]
        return [[tuple(ir.RankedTensorType(m.operands[0].type).shape) for m in b.members]
                for b in plan_buckets(block, cap)]


def test_bucket_size_amortizes_the_latency_within_bounds():
    assert bucket_bytes(CostModel()) == int(25 * 30e-6 * 2.0e9)  # 1.5 MB at the built-in figures
    assert bucket_bytes(CostModel(latency=1e-7)) == MIN_BUCKET
    assert bucket_bytes(CostModel(latency=1.0)) == MAX_BUCKET


def test_members_in_the_order_their_inputs_are_computed_up_to_the_cap():
    assert sizes_of(4096) == [[(8, 16), (16,), (16, 4)]]
    assert sizes_of(600) == [[(8, 16), (16,)]]  # the third would exceed 600 bytes: alone, so no bucket
    assert sizes_of(100) == []


def test_the_argument_and_its_default_in_the_environment(monkeypatch):
    """`compile(buckets=)`: "off" (False, 0), "auto" (True) or bytes; None: $SLICER_BUCKETS, else auto."""
    assert bucket_setting("off") is None and bucket_setting(False) is None and bucket_setting(0) is None
    assert bucket_setting("auto") == 0 and bucket_setting(True) == 0
    assert bucket_setting(np.int64(1 << 20)) == 1 << 20
    for bad in ("big", -1, 2.5, "1"):
        with pytest.raises(OptionError, match=r"buckets=.*'auto' \(the cost model's bucket size\), 'off'"):
            bucket_setting(bad)
    monkeypatch.delenv(BUCKETS.name, raising=False)
    assert bucket_setting() == 0
    monkeypatch.setenv(BUCKETS.name, "off")
    assert bucket_setting() is None and bucket_setting(4096) == 4096  # the argument wins
    monkeypatch.setenv(BUCKETS.name, "1")
    assert bucket_setting() == 0
    monkeypatch.setenv(BUCKETS.name, "1048576")
    assert bucket_setting() == 1 << 20
    monkeypatch.setenv(BUCKETS.name, "big")
    with pytest.raises(OptionError, match="SLICER_BUCKETS='big'"):
        bucket_setting()


GRADS = """
func.func @grads(%x: tensor<8x16xf32>, %dh: tensor<8x32xf32>, %a: tensor<8x32xf32>, %dy: tensor<8x16xf32>)
    -> (tensor<16x32xf32>, tensor<32xf32>, tensor<32x16xf32>) {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<16x32xf32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<16x32xf32>) -> tensor<16x32xf32>
  %t1 = tensor.empty() : tensor<16x8xf32>
  %xt = linalg.transpose ins(%x : tensor<8x16xf32>) outs(%t1 : tensor<16x8xf32>) permutation = [1, 0]
  %dw1 = linalg.matmul ins(%xt, %dh : tensor<16x8xf32>, tensor<8x32xf32>) outs(%f1 : tensor<16x32xf32>) ->
      tensor<16x32xf32>
  %e2 = tensor.empty() : tensor<32xf32>
  %f2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<32xf32>) -> tensor<32xf32>
  %db1 = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (j)>],
                         iterator_types = ["reduction", "parallel"]} ins(%dh : tensor<8x32xf32>)
                             outs(%f2 : tensor<32xf32>) {
  ^bb0(%v: f32, %acc: f32):
    %s = arith.addf %v, %acc : f32
    linalg.yield %s : f32
  } -> tensor<32xf32>
  %e3 = tensor.empty() : tensor<32x16xf32>
  %f3 = linalg.fill ins(%zero : f32) outs(%e3 : tensor<32x16xf32>) -> tensor<32x16xf32>
  %t3 = tensor.empty() : tensor<32x8xf32>
  %at = linalg.transpose ins(%a : tensor<8x32xf32>) outs(%t3 : tensor<32x8xf32>) permutation = [1, 0]
  %dw2 = linalg.matmul ins(%at, %dy : tensor<32x8xf32>, tensor<8x16xf32>) outs(%f3 : tensor<32x16xf32>) ->
      tensor<32x16xf32>
  return %dw1, %db1, %dw2 : tensor<16x32xf32>, tensor<32xf32>, tensor<32x16xf32>
}"""
BATCH = "arg0.0=x;arg1.0=x;arg2.0=x;arg3.0=x"


@pytest.mark.parametrize("results,kind",
                         [("", "all_reduce"), (";result0.0=x;result1.0=x;result2.0=x", "reduce_scatter")])
@pytest.mark.slow
def test_bucketed_gradients_are_bit_identical_on_the_simulator(results, kind):
    """Data parallel MLP gradients (dw1, db1, dw2 as contractions of a batch tiled over x) all_reduced, or
    reduce_scattered over dim 0 as FSDP keeps them."""
    text = GRADS
    tactics = slicer.parse_tactics(BATCH + results)
    rng = np.random.default_rng(5)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in ((8, 16), (8, 32), (8, 32), (8, 16))]
    runs = {}
    for setting in ("off", 8192):
        prog = slicer.compile(text, mesh=slicer.Mesh(x=4), tactics=tactics, buckets=setting)
        collectives = [n.op for n in prog.graph.nodes if isinstance(n, CollectiveNode)]
        assert collectives == [kind] * (3 if setting == "off" else 1)
        runs[setting] = prog.run(*inputs)
    for plain, bucketed in zip(runs["off"], runs[8192]):
        assert plain.tobytes() == bucketed.tobytes()
    np.testing.assert_allclose(runs[8192][0], inputs[0].T @ inputs[1], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(runs[8192][1], inputs[1].sum(0), rtol=1e-5, atol=1e-5)


def test_compile_takes_the_bucket_size(monkeypatch):
    """`slicer.compile(buckets=)`: off keeps one all_reduce per gradient, a size that holds them all makes one,
    one smaller than any pair leaves them alone; unset, $SLICER_BUCKETS decides; the gradients stay numpy's."""
    tactics = slicer.parse_tactics(BATCH)
    rng = np.random.default_rng(6)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in ((8, 16), (8, 32), (8, 32), (8, 16))]

    def collectives(**options) -> int:
        prog = slicer.compile(GRADS, mesh=slicer.Mesh(x=2), tactics=tactics, **options)
        if options.get("buckets") == 8192:
            dw1, db1, dw2 = prog.run(*inputs)
            np.testing.assert_allclose(dw1, inputs[0].T @ inputs[1], rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(db1, inputs[1].sum(0), rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(dw2, inputs[2].T @ inputs[3], rtol=1e-5, atol=1e-5)
        return sum(isinstance(n, CollectiveNode) for n in prog.graph.nodes)

    monkeypatch.delenv(BUCKETS.name, raising=False)
    assert (collectives(buckets="off"), collectives(buckets=8192), collectives(buckets=256)) == (3, 1, 3)
    monkeypatch.setenv(BUCKETS.name, "8192")
    assert collectives() == 1
    monkeypatch.setenv(BUCKETS.name, "0")
    assert collectives() == 3 and collectives(buckets=8192) == 1
    with pytest.raises(OptionError, match="buckets=-1"):
        slicer.compile(GRADS, mesh=slicer.Mesh(x=2), tactics=tactics, buckets=-1)
