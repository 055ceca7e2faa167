"""Rules of gathers by index (`slicer.rules.gathers`): a linalg.generic whose body reads a captured table with
tensor.extract. The table is an operand of the rule after the op's own; its dims walk the loops that index
them, a dim indexed by data (a token id) may be tiled as a sum of masked lookups (vocabulary parallelism), a
merged pair of loop indices (heads = kv_heads * repeats) walks the major loop; a reduction loop whose index
the body compares (the one-hot pick of a target) is split with shifted indices."""

from mlir import ir

import slicer.dialect as sd
from slicer.dialect import SumAction, TileAction
from slicer.rules import RuleOutcome, gathered_tables, rule_for, rule_operands

_ALIVE = []

EMBEDDING = """
  %e = tensor.empty() : tensor<2x8x16xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(b, s, d) -> (b, s)>, affine_map<(b, s, d) -> (b, s, d)>],
                       iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%idx : tensor<2x8xi64>) outs(%e : tensor<2x8x16xf32>) {
  ^bb0(%in: i64, %out: f32):
    %row = arith.index_cast %in : i64 to index
    %col = linalg.index 2 : index
    %v = tensor.extract %table[%row, %col] : tensor<512x16xf32>
    linalg.yield %v : f32
  } -> tensor<2x8x16xf32>"""


def generic_of(body: str, args: str) -> ir.Operation:
    context = sd.make_context()
    with context, ir.Location.unknown():
        module = ir.Module.parse(f"func.func @f({args}) {{\n{body}\n  return\n}}")
    _ALIVE[:] = [context, module]
    return next(op for op in sd.walk_ops(module) if op.name == "linalg.generic")


def embedding(body: str = EMBEDDING) -> ir.Operation:
    return generic_of(body, "%idx: tensor<2x8xi64>, %table: tensor<512x16xf32>")


def test_the_table_is_an_operand_after_the_ops_own():
    op = embedding()
    assert [str(v.type) for v in gathered_tables(op)] == ["tensor<512x16xf32>"]
    assert len(rule_operands(op)) == 3
    rule = rule_for(op)
    assert len(rule.operands) == 3 and "table" in rule.operand_names[2]


def test_embedding_dim_walks_the_loop_that_indexes_it():
    """Tiling the table's dim 1 (the embedding dim) tiles the output's dim 2: the block-relative
    `linalg.index 2` reads the block of the table (the loop is not blocked by that read)."""
    rule = rule_for(embedding())
    assert rule.tile(operand=2, dim=1) == RuleOutcome(loop=2, actions=(TileAction(2),), slices=((1, 2), (2, 1)))
    assert rule.tile(result=0, dim=2) == rule.tile(operand=2, dim=1)


def test_batch_and_sequence_pass_through_without_touching_the_table():
    rule = rule_for(embedding())
    assert rule.tile(operand=0, dim=0) == RuleOutcome(loop=0, actions=(TileAction(0),), slices=((0, 0), (1, 0)))
    assert rule.tile(operand=0, dim=1).action == TileAction(1)


def test_vocabulary_dim_is_a_sum_of_masked_lookups():
    rule = rule_for(embedding())
    outcome = rule.tile(operand=2, dim=0)
    assert outcome == RuleOutcome(actions=(SumAction(),), slices=((2, 0),), gather=(2, 0))
    assert outcome.ok and not outcome.zero_inits


def test_a_gathered_value_not_yielded_as_it_is_blocks_the_vocabulary_dim():
    """Blocks yielding 0 off their range add up to the lookup only when the element is yielded as it is."""
    scaled = EMBEDDING.replace("linalg.yield %v : f32", "%w = arith.addf %v, %out : f32\n    linalg.yield %w : f32")
    outcome = rule_for(embedding(scaled)).tile(operand=2, dim=0)
    assert not outcome.ok and "indexed by data" in outcome.blocked


def test_merged_heads_walk_the_major_loop():
    """view_as_complex of GQA's repeated heads reads q at head `r + kv * 2` (`affine.apply`): tiling the kv
    heads (major) slices q's heads in contiguous blocks; the repeats (minor) cannot be tiled."""
    body = """
  %e = tensor.empty() : tensor<2x2x8xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(kv, rep, c) -> (kv, rep, c)>],
                       iterator_types = ["parallel", "parallel", "parallel"]} outs(%e : tensor<2x2x8xf32>) {
  ^bb0(%out: f32):
    %kv = linalg.index 0 : index
    %rep = linalg.index 1 : index
    %c = linalg.index 2 : index
    %h = affine.apply affine_map<()[s0, s1] -> (s0 + s1 * 2)>()[%rep, %kv]
    %v = tensor.extract %q[%h, %c] : tensor<4x8xf32>
    linalg.yield %v : f32
  } -> tensor<2x2x8xf32>"""
    rule = rule_for(generic_of(body, "%q: tensor<4x8xf32>"))
    assert rule.tile(operand=0, dim=0).slices == ((0, 0), (1, 0))  # the output and q's heads
    assert rule.tile(operand=1, dim=0) == rule.tile(operand=0, dim=0)
    blocked = rule.tile(operand=0, dim=1)
    assert not blocked.ok and "d1" in blocked.blocked


def test_a_constant_position_cannot_be_tiled():
    body = EMBEDDING.replace("%col = linalg.index 2 : index", "%col = arith.constant 3 : index")
    outcome = rule_for(embedding(body)).tile(operand=2, dim=1)
    assert not outcome.ok and "constant position" in outcome.blocked


ONE_HOT_PICK = """
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<16xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(n, v) -> (n)>, affine_map<(n, v) -> (n, v)>,
                                        affine_map<(n, v) -> (n)>], iterator_types = ["parallel", "reduction"]}
      ins(%target, %logp : tensor<16xi64>, tensor<16x512xf32>) outs(%e : tensor<16xf32>) {
  ^bb0(%t: i64, %l: f32, %out: f32):
    %v = linalg.index 1 : index
    %vi = arith.index_cast %v : index to i64
    %hit = arith.cmpi eq, %t, %vi : i64
    %pick = arith.select %hit, %l, %z : f32
    %sum = arith.addf %pick, %out : f32
    linalg.yield %sum : f32
  } -> tensor<16xf32>"""


def test_a_reduction_loop_read_by_index_splits_with_shifted_indices():
    rule = rule_for(generic_of(ONE_HOT_PICK, "%target: tensor<16xi64>, %logp: tensor<16x512xf32>"))
    outcome = rule.tile(operand=1, dim=1)
    assert outcome == RuleOutcome(loop=1, actions=(SumAction(),), slices=((1, 1),), zero_inits=(2,), shift=(1, 512))


def test_a_parallel_loop_read_by_index_stays_blocked():
    body = ONE_HOT_PICK.replace('"reduction"]', '"parallel"]').replace(
        "affine_map<(n, v) -> (n)>], iterator", "affine_map<(n, v) -> (n, v)>], iterator").replace(
        "tensor<16xf32>", "tensor<16x512xf32>").replace("%sum = arith.addf %pick, %out : f32\n    linalg.yield %sum",
                                                        "linalg.yield %pick")
    outcome = rule_for(generic_of(body, "%target: tensor<16xi64>, %logp: tensor<16x512xf32>")).tile(operand=1, dim=1)
    assert not outcome.ok and "linalg.index 1" in outcome.blocked


def test_a_loop_spanning_part_of_a_table_dim_cannot_tile_it():
    """A read of columns 0..7 of a table with 16: the loop's blocks are not the table's blocks."""
    body = EMBEDDING.replace("tensor<2x8x16xf32>", "tensor<2x8x8xf32>")
    outcome = rule_for(embedding(body)).tile(result=0, dim=2)
    assert not outcome.ok
