"""Degraded strategies (slicer.spmd.degraded): a tactic whose tiling stops at an op (6 heads on y=4) has its
value gathered and the op computed whole on every device; the partitioner notes it (tactic, op, why) and
`slicer.compile` warns (`DegradedStrategy`), or raises with strict=True. Where the devices divide the heads, or
the gathered value feeds an op partitioned over the same axis, nothing is said."""

import re
import warnings

import numpy as np
import pytest

import slicer
from slicer.lowering import compile_function

# A weight of 6 heads of 4 columns, tiled by columns: its blocks are whole heads only when the devices divide 6.
HEADS = """
#lhs = affine_map<(d0, d1, d2, d3) -> (d0, d3)>
#rhs = affine_map<(d0, d1, d2, d3) -> (d3, d1, d2)>
#out = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
func.func @heads(%x: tensor<8x24xf32>, %w: tensor<24x24xf32>) -> tensor<8x6x4xf32> {
  %zero = arith.constant 0.0 : f32
  %w3 = tensor.expand_shape %w [[0], [1, 2]] output_shape [24, 6, 4] : tensor<24x24xf32> into tensor<24x6x4xf32>
  %e = tensor.empty() : tensor<8x6x4xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<8x6x4xf32>) -> tensor<8x6x4xf32>
  %y = linalg.generic {indexing_maps = [#lhs, #rhs, #out],
                       iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w3 : tensor<8x24xf32>, tensor<24x6x4xf32>) outs(%init : tensor<8x6x4xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %c, %m : f32
    linalg.yield %s : f32
  } -> tensor<8x6x4xf32>
  return %y : tensor<8x6x4xf32>
}
"""
TACTICS = [slicer.Tile(arg=1, dim=1, axes="y")]


def compiled(devices: int, **options):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prog = slicer.compile(HEADS, mesh=slicer.Mesh(y=devices), tactics=TACTICS, **options)
    return prog, [w for w in caught if issubclass(w.category, slicer.SlicerWarning)]


def test_heads_the_devices_do_not_divide_warn_and_still_compute_the_same():
    prog, said = compiled(4)
    assert [w.category for w in said] == [slicer.DegradedStrategy]
    message = str(said[0].message)
    assert message.startswith("Tile(arg=1, dim=1, axes='y') is degraded: its value ([[],[y]]) is all_gathered "
                              "over y as operand #0 of 'tensor.expand_shape'")
    assert "'linalg.generic' at" in message and "is computed whole on every device instead of split over y" in message
    assert "result #0 dim 1 of 'tensor.expand_shape' has size 6, which y=4 does not divide" in message
    assert f"warning: {message}" in prog.explain()  # in the collectives report too
    assert "!! the tiling over y from Tile(arg=1, dim=1, axes='y') stops here" in prog.explain()
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((8, 24)).astype(np.float32), rng.standard_normal((24, 24)).astype(np.float32)
    np.testing.assert_allclose(prog.run(x, w), compile_function(HEADS)(x, w), rtol=1e-5, atol=1e-5)


def test_strict_makes_it_an_error():
    with pytest.raises(slicer.TacticError, match=re.escape("Tile(arg=1, dim=1, axes='y') is degraded")) as info:
        compiled(4, strict=True)
    assert "strict=True" in str(info.value)


@pytest.mark.parametrize("devices", [2, 3])
def test_heads_the_devices_divide_say_nothing(devices):
    prog, said = compiled(devices)
    assert said == [] and "warning:" not in prog.explain() and "!!" not in prog.explain()
    assert compiled(devices, strict=True)[1] == []


def test_a_gather_for_a_partitioned_op_is_no_degradation():
    """FSDP's pattern: the weight tiled over x for storage, gathered for a matmul inside the batch loop over x."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", slicer.SlicerWarning)
        prog = slicer.compile(HEADS, mesh=slicer.Mesh(x=2), tactics=slicer.parse_tactics("arg0.0=x;arg1.0=x"),
                              strict=True)
    assert [node.op for node in prog.graph.nodes if hasattr(node, "op")] == ["all_gather"]  # the weight, gathered
