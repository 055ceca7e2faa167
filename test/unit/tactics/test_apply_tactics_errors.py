"""apply_tactics against a program: mesh and entry resolution, located errors, module left untouched."""

from pathlib import Path

import pytest
from mlir import ir

import slicer
import slicer.core.names as names
import slicer.dialect as sd
from slicer.dialect.verifier import verify

MLP = (Path(__file__).resolve().parents[3] / "examples" / "mlp.mlir").read_text()
MESH = '"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 4>} : () -> ()\n'
TWO = MESH + """
func.func @f(%a: tensor<8xf32>) -> tensor<8xf32> { return %a : tensor<8xf32> }
func.func @g(%a: tensor<8x4xf32>, %b: tensor<16xf32>) -> tensor<8x4xf32> { return %a : tensor<8x4xf32> }
"""


def parse(text):
    context = sd.make_context()
    with context, ir.Location.unknown():
        return ir.Module.parse(text)


def loops(module):
    return [sd.LoopOp(op) for op in sd.walk_ops(module.operation, names.LOOP)]


def errors_of(module, tactics, **kwargs):
    with pytest.raises(slicer.TacticError) as info:
        slicer.apply_tactics(module, tactics, **kwargs)
    return [d.message for d in info.value.diagnostics]


def test_errors_are_all_reported_and_nothing_is_rewritten():
    module = parse(MLP)
    before = str(module)
    messages = errors_of(
        module,
        [
            slicer.Tile(arg=4, dim=0, axes="x"),
            slicer.Tile(arg=0, dim=0, axes="z"),
            slicer.Tile(arg=0, dim=2, axes="x"),
            slicer.Tile(arg=2, dim=0, axes=("x", "y", "w")),
            slicer.Tile(result=1, dim=0, axes="x"),
            slicer.Tile(arg=1, dim=1, axes="y"),
            slicer.Tile(arg=1, dim=0, axes="y"),
        ],
        mesh={"x": 2, "y": 4, "w": 3},
    )
    assert messages == [
        "Tile(arg=4, dim=0, axes='x'): @mlp has 4 arguments (valid: arg=0..3)",
        "Tile(arg=0, dim=0, axes='z'): unknown mesh axis 'z' (mesh @mesh has axes x, y, w)",
        "Tile(arg=0, dim=2, axes='x'): dim 2 is out of range: argument #0 of @mlp has type tensor<8x16xf32> "
        "(rank 2, dims 0..1)",
        "Tile(arg=2, dim=0, axes=('x', 'y', 'w')): dim 0 of argument #2 of @mlp has size 32, which is not "
        "divisible by 24 (|x|=2 * |y|=4 * |w|=3); a dim that does not divide is tiled over one mesh axis only "
        "(padded blocks): tile it over one axis or choose axes whose sizes divide 32",
        "Tile(result=1, dim=0, axes='x'): @mlp has 1 result (valid: result=0..0)",
        "Tile(arg=1, dim=0, axes='y'): mesh axis 'y' already tiles dim 1 of argument #1 of @mlp; "
        "a value can be tiled over each mesh axis once",
    ]
    assert str(module) == before  # no mesh inserted, no loop built


def test_mesh_given_as_mapping_is_inserted_once_and_reused():
    module = parse(MLP)
    slicer.apply_tactics(module, [slicer.Tile(arg=0, dim=0, axes="x")], mesh={"x": 2, "y": 4})
    assert [(name, m.mesh()) for name,
            m in sd.find_meshes(module.operation).items()] == [("mesh", slicer.Mesh(x=2, y=4))]

    slicer.apply_tactics(module, [slicer.Tile(arg=3, dim=0, axes="y")], mesh=slicer.Mesh(x=2, y=4))
    assert len(sd.find_meshes(module.operation)) == 1
    # each call starts again at the top of the function, so the second call's loop comes first
    assert [(lp.range, lp.action) for lp in loops(module)] == [
        (sd.RangeType(("y",), 4), sd.TileAction(0)),
        (sd.RangeType(("x",), 2), sd.TileAction(0)),
    ]
    assert verify(module) == []
    assert errors_of(module, [slicer.Replicate(arg=0)], mesh={"x": 4}) == [
        "no declared mesh has axes x=4 (declared meshes: @mesh); pass the name of a declared mesh as mesh="
    ]


def test_mesh_is_required_and_must_be_named_among_several():
    assert errors_of(parse(MLP), [slicer.Replicate(arg=0)])[0].startswith(
        "tactics need a mesh and the module declares no slicer.mesh"
    )
    two_meshes = MESH + MESH.replace('"mesh"', '"other"') + MLP
    assert errors_of(parse(two_meshes), [slicer.Replicate(arg=0)]) == [
        "tactics need a mesh and the module declares 2 (@mesh, @other): name one with mesh="
    ]
    module = parse(two_meshes)
    slicer.apply_tactics(module, [slicer.Tile(arg=0, dim=0, axes="y")], mesh="other")
    assert [lp.mesh for lp in loops(module)] == ["other"]


def test_entry_selects_the_function_positions_refer_to():
    assert errors_of(parse(TWO), [slicer.Replicate(arg=0)]) == [
        "tactics refer to a function by its arguments' positions, but the module has 2 functions (@f, @g) and 2 "
        "public ones; name the one you mean (entry=..., or --entry)"
    ]
    assert errors_of(parse(TWO), [slicer.Replicate(arg=0)], entry="h") == [
        "tactics refer to a function by its arguments' positions, but the module has no function @h (functions: "
        "@f, @g)"
    ]
    module = parse(TWO)
    slicer.apply_tactics(module, [slicer.Tile(arg=1, dim=0, axes=("x", "y"))], entry="@g")
    (lp,) = loops(module)
    assert ir.StringAttr(lp.operation.parent.attributes["sym_name"]).value == "g"
    assert lp.range == sd.RangeType(("x", "y"), 8)


def test_conflicts_between_tactics_on_one_value():
    assert errors_of(parse(MLP), [slicer.Tile(arg=0, dim=0, axes="x"), slicer.Tile(arg=0, dim=0, axes="y")],
                     mesh={"x": 2, "y": 4}) == [
        "Tile(arg=0, dim=0, axes='y'): dim 0 of argument #0 of @mlp is already tiled over x by an earlier tactic; "
        "to tile one dim over several axes give them in one tactic, major to minor (axes=('x', 'y'))"
    ]
    assert errors_of(parse(MLP), [slicer.Tile(result=0, dim=1, axes="x"), slicer.Replicate(result=0)],
                     mesh={"x": 2}) == [
        "Replicate(result=0): result #0 of @mlp is already tiled (dim 1 over x) by an earlier tactic; "
        "a value is either tiled or replicated, drop one of the two"
    ]


def test_annotation_errors_name_their_origin():
    text = MESH + """
func.func @f(%a: tensor<6x4xf32>) -> tensor<6x4xf32> {
  %b = "slicer.annotate"(%a) {sharding = #slicer.sharding<@mesh, [["x", "y"], []]>} : (tensor<6x4xf32>) ->
      tensor<6x4xf32>
  return %b : tensor<6x4xf32>
}"""
    assert errors_of(parse(text), []) == [
        "Tile(dim=0, axes=('x', 'y')) from 'slicer.annotate': dim 0 of the 'slicer.annotate' value has size 6, "
        "which is not divisible by 8 (|x|=2 * |y|=4); a dim that does not divide is tiled over one mesh axis only "
        "(padded blocks): tile it over one axis or choose axes whose sizes divide 6"
    ]
    twice = MESH + """
func.func @f(%a: tensor<8xf32> {slicer.sharding = #slicer.sharding<@mesh, [["x", "x"]]>}) -> tensor<8xf32> {
  return %a : tensor<8xf32>
}"""
    assert errors_of(parse(twice), []) == [
        "the slicer.sharding of argument #0 of @f: sharding [[x,x]] lists an axis twice for dim 0; "
        "a dim is tiled by each axis at most once"
    ]


def test_applying_tactics_twice_and_replicating_twice():
    module = parse(MLP)
    slicer.apply_tactics(module, [slicer.Replicate(arg=2), slicer.Replicate(arg=2)], mesh={"x": 2})
    annotations = [sd.AnnotateOp(op) for op in sd.walk_ops(module.operation, names.ANNOTATE)]
    assert [a.sharding for a in annotations] == [sd.Sharding("mesh", ((),))]
    once = str(module)
    slicer.apply_tactics(module)  # the all-empty annotation is already the record: nothing changes
    assert str(module) == once


def test_non_tactics_are_rejected():
    with pytest.raises(slicer.InvalidTactic, match="is not a tactic; use slicer.Tile"):
        slicer.apply_tactics(parse(MLP), ["arg0.0=x"], mesh={"x": 2})


NAMED = MESH + """
func.func @mlp(%x: tensor<8x16xf32> {slicer.name = "x"}, %w1: tensor<16x32xf32> {slicer.name = "fc1.weight"},
               %w2: tensor<32x16xf32> {slicer.name = "fc2.weight"}, %w3: tensor<16xf32> {slicer.name = "dup"},
               %w4: tensor<16xf32> {slicer.name = "dup"}, %w5: tensor<16xf32>) -> tensor<8x16xf32> {
  return %x : tensor<8x16xf32>
}
"""


def test_tactics_name_arguments_that_carry_names():
    """`slicer.name` on an argument (what `slicer.from_torch` puts on every argument) lets tactics name it; the
    loop is the one a tactic by position makes."""
    by_name = slicer.apply_tactics(parse(NAMED), [slicer.Tile(arg="fc1.weight", dim=1, axes="y")])
    by_position = slicer.apply_tactics(parse(NAMED), [slicer.Tile(arg=1, dim=1, axes="y")])
    assert str(by_name).replace("Tile(arg='fc1.weight'", "Tile(arg=1") == str(by_position)
    assert [str(loop.range) for loop in loops(by_name)] == ["range<y, 4>"]


def test_unknown_and_ambiguous_names_list_the_known_ones():
    module = parse(NAMED)
    before = str(module)
    messages = errors_of(module, slicer.parse_tactics("fc1.wieght.1=y;dup=replicated;fc2.weight.0=replicated;nope.0=x"))
    assert messages == [
        "Tile(arg='fc1.wieght', dim=1, axes='y'): @mlp has no argument named 'fc1.wieght' (did you mean "
        "'fc1.weight', 'fc2.weight'?); its arguments are named: x, fc1.weight, fc2.weight, dup, dup",
        "Replicate(arg='dup'): 2 arguments of @mlp are named 'dup' (#3, #4); refer to one by position (argI)",
        "Replicate(arg='fc2.weight.0'): @mlp has no argument named 'fc2.weight.0' ('fc2.weight' is; a replicated "
        "value has no dim: write fc2.weight=replicated); its arguments are named: x, fc1.weight, fc2.weight, dup, dup",
        "Tile(arg='nope', dim=0, axes='x'): @mlp has no argument named 'nope'; its arguments are named: x, "
        "fc1.weight, fc2.weight, dup, dup",
    ]
    assert str(module) == before
    unnamed = errors_of(parse(MLP), [slicer.Tile(arg="w1", dim=1, axes="y")], mesh={"x": 2, "y": 4})
    assert unnamed == ["Tile(arg='w1', dim=1, axes='y'): the arguments of @mlp carry no names, so 'w1' names "
                       "nothing; refer to them by position (arg0..arg3), or name them with the argument attribute "
                       "{slicer.name = \"...\"}"]
