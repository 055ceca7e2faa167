"""Tactics by name pattern on arguments and results: expansion in order, errors naming the closest names, the
text form round-trip, and repeated tactics applied once."""

import pytest
from mlir import ir

import slicer
import slicer.core.names as names
import slicer.dialect as sd
from slicer.passes import run_pipeline
from slicer.tactics.patterns import closest, is_pattern, matching

MESH = '"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 2>} : () -> ()\n'
STEP = MESH + """
func.func @step(%x: tensor<4x8xf32> {slicer.name = "x"},
                %q: tensor<8x8xf32> {slicer.name = "blocks.0.attn.q.weight"},
                %k: tensor<8x8xf32> {slicer.name = "blocks.0.attn.k.weight"},
                %q1: tensor<8x8xf32> {slicer.name = "blocks.1.attn.q.weight"},
                %m: tensor<8x8xf32> {slicer.name = "exp_avg.blocks.0.attn.q.weight"},
                %v: tensor<8x8xf32> {slicer.name = "exp_avg_sq.blocks.0.attn.q.weight"})
    -> (tensor<4x8xf32> {slicer.name = "loss"}, tensor<8x8xf32> {slicer.name = "exp_avg.blocks.0.attn.q.weight"},
        tensor<8x8xf32> {slicer.name = "exp_avg_sq.blocks.0.attn.q.weight"}) {
  return %x, %m, %v : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>
}
"""


def parse(text=STEP):
    with sd.make_context(), ir.Location.unknown():
        return ir.Module.parse(text)


def loop_targets(module):
    """(tactic label, tiled dim) of every loop, in program order."""
    return [(ir.StringAttr(op.attributes[names.TACTIC_ATTR]).value, sd.LoopOp(op).action.dim)
            for op in sd.walk_ops(module.operation, names.LOOP)]


def errors_of(tactics, text=STEP):
    with pytest.raises(slicer.TacticError) as info:
        slicer.apply_tactics(parse(text), tactics)
    return [d.message for d in info.value.diagnostics]


def test_star_matches_across_dots_and_expands_in_order():
    assert matching("blocks.*.q.weight", ["x", "blocks.0.attn.q.weight", "blocks.1.attn.q.weight",
                                          "exp_avg.blocks.0.attn.q.weight"]) == [1, 2]
    assert matching("exp_avg.*", ["exp_avg.w", "exp_avg_sq.w", None, "exp_avg.b"]) == [0, 3]
    assert matching("blocks.[!0].*", ["blocks.0.w", "blocks.1.w"]) == [1]
    assert matching("w[0]", ["w[0]", "w0"]) == [0, 1]  # a name equal to the pattern matches too
    assert not is_pattern("fc1.weight") and is_pattern("fc?.weight")


def test_a_pattern_tiles_every_matching_argument_in_order():
    module = parse()
    slicer.apply_tactics(module, [slicer.Tile(arg="blocks.*.attn.q.weight", dim=0, axes="y")])
    tactic = "Tile(arg='blocks.*.attn.q.weight', dim=0, axes='y')"
    # each loop is inserted at the top of the function, after the loops before it
    assert loop_targets(module) == [(f"{tactic} on 'blocks.0.attn.q.weight'", 0),
                                    (f"{tactic} on 'blocks.1.attn.q.weight'", 0)]
    by_position = parse()
    slicer.apply_tactics(by_position, [slicer.Tile(arg=1, dim=0, axes="y"), slicer.Tile(arg=3, dim=0, axes="y")])
    strip = lambda m: str(m).replace(tactic + " on 'blocks.0.attn.q.weight'", "A").replace(  # noqa: E731
        tactic + " on 'blocks.1.attn.q.weight'", "B")
    assert strip(module) == str(by_position).replace("Tile(arg=1, dim=0, axes='y')", "A").replace(
        "Tile(arg=3, dim=0, axes='y')", "B")


def test_a_pattern_on_results_uses_the_result_names():
    module = parse()
    slicer.apply_tactics(module, [slicer.Tile(result="exp_avg*.*", dim=1, axes="x"),
                                  slicer.Replicate(result="loss")])
    ret = [op for op in sd.walk_ops(module.operation, "func.return")][0]
    producers = [operand.owner.name for operand in ret.operands]
    assert producers == [names.ANNOTATE, names.LOOP, names.LOOP]
    assert [label for label, _ in loop_targets(module)] == [
        "Tile(result='exp_avg*.*', dim=1, axes='x') on 'exp_avg.blocks.0.attn.q.weight'",
        "Tile(result='exp_avg*.*', dim=1, axes='x') on 'exp_avg_sq.blocks.0.attn.q.weight'"]


def test_a_pattern_that_matches_nothing_names_the_closest_names():
    assert errors_of([slicer.Tile(arg="blocks.*.atn.q.weight", dim=0, axes="y")]) == [
        "Tile(arg='blocks.*.atn.q.weight', dim=0, axes='y'): the pattern 'blocks.*.atn.q.weight' matches no argument "
        "of @step (closest names: 'blocks.1.attn.q.weight', 'blocks.0.attn.q.weight', 'blocks.0.attn.k.weight'); "
        "'*' matches any characters, dots included; its arguments are named: x, blocks.0.attn.q.weight, "
        "blocks.0.attn.k.weight, blocks.1.attn.q.weight, exp_avg.blocks.0.attn.q.weight, "
        "exp_avg_sq.blocks.0.attn.q.weight"]
    unnamed = MESH + "func.func @f(%a: tensor<8xf32>) -> tensor<8xf32> { return %a : tensor<8xf32> }"
    (message,) = errors_of([slicer.Replicate(result="out*")], unnamed)
    assert "the results of @f carry no names, so the pattern 'out*' matches nothing" in message


def test_closest_falls_back_to_the_literal_parts_of_a_pattern():
    assert closest("momentum.*", ["x", "exp_avg.momentum.w", "step"]) == ["exp_avg.momentum.w"]
    assert closest("zz*", ["a", "b"]) == []


def test_a_pattern_tile_conflicting_with_a_name_tile_is_reported_per_value():
    messages = errors_of([slicer.Tile(arg="blocks.0.attn.q.weight", dim=0, axes="y"),
                          slicer.Tile(arg="blocks.*.q.weight", dim=0, axes="x")])
    assert messages == [
        "Tile(arg='blocks.*.q.weight', dim=0, axes='x') on 'blocks.0.attn.q.weight': dim 0 of argument #1 "
        "(blocks.0.attn.q.weight) of @step is already tiled over y by an earlier tactic; to tile one dim over "
        "several axes give them in one tactic, major to minor (axes=('y', 'x'))"]


def test_a_repeated_tactic_is_applied_once():
    module = parse()
    tile = slicer.Tile(arg="x", dim=0, axes="x")
    slicer.apply_tactics(module, [tile, slicer.Tile(arg=0, dim=0, axes="x"), tile])
    assert loop_targets(module) == [("Tile(arg='x', dim=0, axes='x')", 0)]


@pytest.mark.parametrize("text, tactics", [
    ("result:exp_avg.*.0=x", (slicer.Tile(result="exp_avg.*", dim=0, axes="x"),)),
    ("blocks.*.attn.q.weight.0=y", (slicer.Tile(arg="blocks.*.attn.q.weight", dim=0, axes="y"),)),
    ("result:loss=replicated;fc?.bias=replicated", (slicer.Replicate(result="loss"), slicer.Replicate(arg="fc?.bias"))),
    ("result:layers.[01].w.1=x,y", (slicer.Tile(result="layers.[01].w", dim=1, axes=("x", "y")),)),
    ("arg:arg0.1=x;arg:result:w=replicated", (slicer.Tile(arg="arg0", dim=1, axes="x"),
                                              slicer.Replicate(arg="result:w"))),
])
def test_the_text_form_round_trips_names_and_patterns(text, tactics):
    assert slicer.parse_tactics(text) == tactics
    assert slicer.format_tactics(tactics) == text
    assert slicer.parse_tactics(slicer.format_tactics(tactics)) == tactics


def test_the_pass_option_takes_result_patterns():
    module = parse()
    run_pipeline(module, "slicer-apply-tactics{tactics=result:exp_avg.*.0=x;blocks.*.q.weight.1=y}")
    labels = [label for label, _ in loop_targets(module)]
    assert labels == ["Tile(arg='blocks.*.q.weight', dim=1, axes='y') on 'blocks.0.attn.q.weight'",
                      "Tile(arg='blocks.*.q.weight', dim=1, axes='y') on 'blocks.1.attn.q.weight'",
                      "Tile(result='exp_avg.*', dim=0, axes='x') on 'exp_avg.blocks.0.attn.q.weight'"]


def test_the_pass_refuses_a_remat_item_saying_where_it_applies():
    """`remat:` parses with the other tactics, but it places no value: `slicer-apply-tactics` reports it (it
    crashed with an AttributeError before) and applies nothing."""
    module = parse()
    with pytest.raises(ir.MLIRError) as info:
        run_pipeline(module, "slicer-apply-tactics{tactics=x.0=x;remat:blocks.*=full}")
    assert "Remat(pattern='blocks.*', policy='full') is applied after partitioning" in str(info.value)
    assert loop_targets(module) == []
