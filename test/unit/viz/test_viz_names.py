"""Values named by the program's own names everywhere: a block picture, `show`, the memory report and
`explain` accept and print an argument's or result's `slicer.name` (a model's input "x", a parameter
"fc1.weight", a result "out"), as `slicer.from_torch` and `slicer.training_step` name them; SSA names still
work."""

import re

import pytest

import slicer

NAMED = """
#lhs = affine_map<(d0, d1, d2) -> (d0, d2)>
#rhs = affine_map<(d0, d1, d2) -> (d2, d1)>
#out = affine_map<(d0, d1, d2) -> (d0, d1)>
func.func @f(%arg0: tensor<8x16xf32> {slicer.name = "x"}, %arg1: tensor<16x32xf32> {slicer.name = "fc1.weight"})
    -> (tensor<8x32xf32> {slicer.name = "out"}) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x32xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<8x32xf32>) -> tensor<8x32xf32>
  %y = linalg.generic {indexing_maps = [#lhs, #rhs, #out], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%arg0, %arg1 : tensor<8x16xf32>, tensor<16x32xf32>) outs(%init : tensor<8x32xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %c, %m : f32
    linalg.yield %s : f32
  } -> tensor<8x32xf32>
  return %y : tensor<8x32xf32>
}
"""


@pytest.fixture(scope="module")
def prog():
    return slicer.compile(NAMED, mesh=slicer.Mesh(y=2), tactics=slicer.parse_tactics("fc1.weight.1=y"))


def test_pictures_take_and_print_argument_and_result_names(prog):
    assert prog.picture("fc1.weight").text().splitlines()[0] == \
        "argument #1 fc1.weight (%1): f32[16, 32] as [[],[y]] on mesh y=2"
    assert prog.picture("x").text().startswith("argument #0 x (%0): f32[8, 16]")
    assert prog.picture("out").text().startswith("result #0 out (")
    assert prog.picture("%arg1").text().startswith("argument #1 fc1.weight (%1)")  # the SSA name still works


def test_show_prints_the_name(prog, capsys):
    prog.show("fc1.weight")
    assert capsys.readouterr().out.startswith("argument #1 fc1.weight (%1)")


def test_memory_and_explain_list_names(prog):
    memory = prog.memory().text()
    assert re.search(r"argument #0 x \(%0\)\s+f32\[8, 16\]", memory)
    assert re.search(r"argument #1 fc1.weight \(%1\)\s+f32\[16, 32\] as \[\[\],\[y\]\]", memory)
    assert re.search(r"result #0 out \(%\d+\)\s+f32\[8, 32\]", memory)
    assert "%arg" not in memory
    explain = prog.explain()
    assert "arg #1 (fc1.weight): f32[16, 32] as [[],[y]]" in explain and "result #0 (out): [8, 32]" in explain


def test_unknown_names_list_the_named_values(prog):
    with pytest.raises(slicer.VizError, match=re.escape("argument #1 fc1.weight (%1)")):
        prog.picture("fc2.weight")
