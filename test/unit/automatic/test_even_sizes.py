"""A tiling reaching a dim it does not divide, where the dim cannot be padded (a reshape splitting the tiled dim into
heads, as attention does), stops there: propagation gathers the value before that op (`_indivisible`), and the
search's model does too (`OpSketch.even_sizes`), so it prices the all_gather and the whole value after it instead of
blocks the compiled program never has (the GPT step on 8 devices: a tiling modelled at 8.2 MiB compiled to 13.5)."""

import pytest

import slicer
from slicer.automatic import Evaluator, read_sketch

HEADS = """
func.func @heads(%x: tensor<8x12xf32>) -> tensor<8xHx12/Hxf32> {
  %e = tensor.expand_shape %x [[0], [1, 2]] output_shape [8, H, 12/H] : tensor<8x12xf32> into tensor<8xHx12/Hxf32>
  return %e : tensor<8xHx12/Hxf32>
}
"""


def program(heads: int) -> str:
    return HEADS.replace("12/H", str(12 // heads)).replace("H", str(heads))


@pytest.mark.parametrize("heads, gathered", [(3, True), (2, False)])
def test_the_model_gathers_where_propagation_stops(heads, gathered):
    text = program(heads)
    sketch = read_sketch(text, None, (), ())
    est = Evaluator(sketch, slicer.Mesh(x=2)).evaluate(((((), ("x",))),))
    assert [c.kind for c in est.collectives] == (["all_gather"] if gathered else [])
    compiled = slicer.compile(text, mesh={"x": 2}, tactics=slicer.parse_tactics("arg0.1=x"))
    assert ("all_gather" in compiled.spmd) == gathered
