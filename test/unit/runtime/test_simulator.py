"""The SPMD simulator: shard collectives executed with the redistribution semantics (axis order and group
order checked on hand-written SPMD functions), and wrong SPMD programs are caught."""

import re
from pathlib import Path

import numpy as np
import pytest

from slicer.core.errors import SimulationError
from slicer.passes import transform
from slicer.runtime import Simulator
from slicer.runtime.simulation.oracle import compare

ROOT = Path(__file__).resolve().parents[3]


def partition(module, pipeline: str = "slicer-partition", **options) -> str:
    """`pipeline` (default: slicer-partition) on a copy of `module`; the result's text."""
    return transform(module, pipeline, **options)


def spmd(mesh: str, shape: str, arg: str, body: str, res_type: str, res: str) -> str:
    sizes = "x".join(p.split("=")[1] for p in mesh.split(","))
    names = ", ".join(f'"{p.split("=")[0]}"' for p in mesh.split(","))
    return f"""
shard.grid @mesh(shape = {sizes}) {{slicer.axes = [{names}]}}
func.func @g(%a: {shape} {{slicer.dist = "{arg}"}}) -> ({res_type} {{slicer.dist = "{res}"}})
    attributes {{slicer.spmd_mesh = "{mesh}"}} {{
{body}
}}"""


def test_all_gather_over_two_axes_concatenates_in_listed_order():
    # [[y,x],[]]: row block idx(y)*2 + idx(x); gathering over grid_axes [1, 0] (y major) restores the array
    text = spmd("x=2,y=4", "tensor<1x8xf32>", "[[y,x],[]]", """
  %g = shard.all_gather %a on @mesh grid_axes = [1, 0] gather_axis = 0 {slicer.dist = ["[[],[]]"]} : tensor<1x8xf32> ->
      tensor<8x8xf32>
  return %g : tensor<8x8xf32>""", "tensor<8x8xf32>", "[[],[]]")
    a = np.arange(64, dtype=np.float32).reshape(8, 8)
    np.testing.assert_array_equal(Simulator(text)(a), a)
    # listing the axes the other way round (x major) concatenates the row blocks in another order
    wrong = text.replace("grid_axes = [1, 0]", "grid_axes = [0, 1]")
    out = Simulator(wrong)(a)
    np.testing.assert_array_equal(out, a.reshape(4, 2, 8).transpose(1, 0, 2).reshape(8, 8))


def test_all_to_all_and_reduce_scatter():
    text = spmd("x=2,y=2", "tensor<4x2xf32>", "[[x],[y]]", """
  %t = shard.all_to_all %a on @mesh grid_axes = [0] split_axis = 1 concat_axis = 0 {slicer.dist = ["[[],[y,x]]"]} :
      tensor<4x2xf32> -> tensor<8x1xf32>
  return %t : tensor<8x1xf32>""", "tensor<8x1xf32>", "[[],[y,x]]")
    a = np.arange(32, dtype=np.float32).reshape(8, 4)
    np.testing.assert_array_equal(Simulator(text)(a), a)
    text = spmd("y=4", "tensor<8x4xf32>", "[[],[]] partial=[y]", """
  %r = shard.reduce_scatter %a on @mesh grid_axes = [0] scatter_axis = 0 {slicer.dist = ["[[y],[]]"]} : tensor<8x4xf32>
      -> tensor<2x4xf32>
  return %r : tensor<2x4xf32>""", "tensor<2x4xf32>", "[[y],[]]")
    np.testing.assert_array_equal(Simulator(text)(a), a)


def test_a_missing_all_reduce_is_caught():
    loops = (ROOT / "examples" / "megatron_mlp_loops.mlir").read_text()
    good = partition(loops)
    assert compare(loops, good).max_error < 1e-4
    # drop the all_reduce: every device returns its partial product, which the result type calls replicated
    bad = re.sub(r"return %all_reduce", "return %6", good)
    assert bad != good
    with pytest.raises(SimulationError, match="differs from another replica"):
        compare(loops, bad)


def test_a_wrong_block_offset_is_caught():
    loops = """
"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 4>} : () -> ()
func.func @f(%a: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %n = arith.negf %a : tensor<8x4xf32>
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 4>):
    %b = "slicer.slice"(%n, %r) {dim = 0 : i64} : (tensor<8x4xf32>, !slicer.range<"x", 4>) -> tensor<2x4xf32>
    tosa.yield %b : tensor<2x4xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}"""
    good = partition(loops)
    assert compare(loops, good).exact
    bad = good.replace("arith.constant 2 : index", "arith.constant 1 : index")
    assert bad != good
    assert not compare(loops, bad).exact
