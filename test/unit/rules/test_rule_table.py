"""The rule table derived from linalg indexing maps (and the explicit non-linalg entries)."""

import pytest
from mlir import ir

import slicer.core.names as ir_names
import slicer.dialect as sd
from slicer.core.errors import InternalError
from slicer.dialect import SumAction, TileAction
from slicer.rules import NoRule, RuleOutcome, rule_for

T = TileAction
ID2 = "affine_map<(i, j) -> (i, j)>"
_ALIVE = []  # contexts and modules of the parsed programs: the ops handed out must outlive the call


def op_named(body: str, name: str, args: str) -> ir.Operation:
    """Parse `func.func @f(args) { body; return }` and return its first op called `name`."""
    context = sd.make_context()
    with context, ir.Location.unknown():
        module = ir.Module.parse(f"func.func @f({args}) {{\n{body}\n  return\n}}")
    _ALIVE[:] = [context, module]
    return next(op for op in sd.walk_ops(module) if op.name == name)


def generic(maps, iterators, ins, outs, region):
    return (f"%e = tensor.empty() : {outs}\n"
            f"%r = linalg.generic {{indexing_maps = [{', '.join(maps)}], iterator_types = {iterators}}} "
            f"ins({ins}) outs(%e : {outs}) {{\n{region}\n}} -> {outs}")


def test_matmul():
    rule = rule_for(op_named(
        "%e = tensor.empty() : tensor<8x4xf32>\n"
        "%c = linalg.matmul ins(%a, %b : tensor<8x16xf32>, tensor<16x4xf32>) outs(%e : tensor<8x4xf32>) -> "
        "tensor<8x4xf32>",
        "linalg.matmul", "%a: tensor<8x16xf32>, %b: tensor<16x4xf32>"))
    assert rule.iterator_types == ("parallel", "parallel", "reduction")
    # rows of A: parallel d0, A and C sliced on dim 0, result tiled on dim 0
    assert rule.tile(operand=0, dim=0) == RuleOutcome(loop=0, actions=(T(0),), slices=((0, 0), (2, 0)))
    # the contraction: reduction d2 with an addf combiner -> partial sums, C's init must start from zero
    assert rule.tile(operand=0, dim=1) == RuleOutcome(loop=2, actions=(SumAction(),), slices=((0, 1), (1, 0)),
                                                      zero_inits=(2,))
    assert rule.tile(operand=1, dim=0) == rule.tile(operand=0, dim=1)
    # columns of B (Megatron's first weight)
    assert rule.tile(operand=1, dim=1) == RuleOutcome(loop=1, actions=(T(1),), slices=((1, 1), (2, 1)))
    assert rule.tile(result=0, dim=1) == rule.tile(operand=1, dim=1)
    assert rule.tile(result=0, dim=0).action == T(0)


def test_batch_matmul():
    rule = rule_for(op_named(
        "%e = tensor.empty() : tensor<2x8x4xf32>\n"
        "%c = linalg.batch_matmul ins(%a, %b : tensor<2x8x16xf32>, tensor<2x16x4xf32>) outs(%e : tensor<2x8x4xf32>) "
        "-> tensor<2x8x4xf32>",
        "linalg.batch_matmul", "%a: tensor<2x8x16xf32>, %b: tensor<2x16x4xf32>"))
    assert rule.iterator_types == ("parallel",) * 3 + ("reduction",)
    assert rule.tile(operand=0, dim=0) == RuleOutcome(loop=0, actions=(T(0),), slices=((0, 0), (1, 0), (2, 0)))
    assert rule.tile(operand=1, dim=1) == RuleOutcome(loop=3, actions=(SumAction(),), slices=((0, 2), (1, 1)),
                                                      zero_inits=(2,))
    assert rule.tile(result=0, dim=2) == RuleOutcome(loop=2, actions=(T(2),), slices=((1, 2), (2, 2)))


def test_bias_add_generic():
    body = generic([ID2, "affine_map<(i, j) -> (j)>", ID2], '["parallel", "parallel"]',
                   "%h, %b : tensor<8x32xf32>, tensor<32xf32>", "tensor<8x32xf32>",
                   "^bb0(%x: f32, %y: f32, %o: f32):\n %s = arith.addf %x, %y : f32\n linalg.yield %s : f32")
    rule = rule_for(op_named(body, "linalg.generic", "%h: tensor<8x32xf32>, %b: tensor<32xf32>"))
    # the bias walks d1: tiling it slices the matrix's columns too; the rows leave the bias whole
    assert rule.tile(operand=1, dim=0) == RuleOutcome(loop=1, actions=(T(1),), slices=((0, 1), (1, 0), (2, 1)))
    assert rule.tile(operand=0, dim=0) == RuleOutcome(loop=0, actions=(T(0),), slices=((0, 0), (2, 0)))


def reduction(combine: str, args="%a: tensor<8x16xf32>"):
    return op_named(generic([ID2, "affine_map<(i, j) -> (i)>"], '["parallel", "reduction"]',
                            "%a : tensor<8x16xf32>", "tensor<8xf32>",
                            "^bb0(%v: f32, %acc: f32):\n" + combine), "linalg.generic", args)


def test_sum_reduction_is_additive():
    rule = rule_for(reduction(" %r = arith.addf %acc, %v : f32\n linalg.yield %r : f32"))
    assert rule.combiners == (None,)
    assert rule.tile(operand=0, dim=1) == RuleOutcome(loop=1, actions=(SumAction(),), slices=((0, 1),),
                                                      zero_inits=(1,))
    assert rule.tile(operand=0, dim=0) == RuleOutcome(loop=0, actions=(T(0),), slices=((0, 0), (1, 0)))
    # an addition of a value computed from the inputs (here v * v) is still additive
    squares = rule_for(reduction(" %m = arith.mulf %v, %v : f32\n %r = arith.addf %m, %acc : f32\n"
                                 " linalg.yield %r : f32"))
    assert squares.tile(operand=0, dim=1).action == SumAction()


def test_max_reduction_is_blocked_and_names_the_combiner():
    rule = rule_for(reduction(" %r = arith.maximumf %acc, %v : f32\n linalg.yield %r : f32"))
    outcome = rule.tile(operand=0, dim=1)
    assert outcome == RuleOutcome.block(
        "linalg.generic: loop d1 is a reduction and result #0's reduction combiner is arith.maximumf, not an "
        "addition, so partial results cannot be added up", loop=1)
    assert not outcome.ok
    # the parallel dim of the same op is fine
    assert rule.tile(operand=0, dim=0).ok


@pytest.mark.parametrize("combine, reason", [
    (" %m = arith.mulf %acc, %v : f32\n %r = arith.addf %m, %v : f32\n linalg.yield %r : f32",
     "reduction combiner arith.addf does not add to the output block argument"),
    (" %m = arith.mulf %acc, %v : f32\n %r = arith.addf %acc, %m : f32\n linalg.yield %r : f32",
     "the value it adds to the output also reads the output"),
    (" linalg.yield %v : f32", "body yields an input element, overwriting the output"),
])
def test_other_non_additive_bodies(combine, reason):
    outcome = rule_for(reduction(combine)).tile(operand=0, dim=1)
    assert outcome.blocked is not None and reason in outcome.blocked


def test_non_plain_index_blocks_the_dims_it_mixes():
    body = generic(["affine_map<(i, j) -> (i + j)>", "affine_map<(i, j) -> (j)>", "affine_map<(i, j) -> (i)>"],
                   '["parallel", "reduction"]', "%a, %k : tensor<10xf32>, tensor<3xf32>", "tensor<8xf32>",
                   "^bb0(%x: f32, %y: f32, %o: f32):\n %m = arith.mulf %x, %y : f32\n"
                   " %s = arith.addf %o, %m : f32\n linalg.yield %s : f32")
    rule = rule_for(op_named(body, "linalg.generic", "%a: tensor<10xf32>, %k: tensor<3xf32>"))
    assert rule.tile(operand=0, dim=0) == RuleOutcome.block(
        "linalg.generic: operand #0 (input 0) dim 0 is indexed by d0 + d1, not a plain loop dim")
    assert rule.tile(result=0, dim=0) == RuleOutcome.block(
        "linalg.generic: operand #0 (input 0) dim 0 is indexed by d0 + d1, not a plain loop dim (it mixes loop d0 "
        "with other loops), so it cannot be sliced along d0", loop=0)
    assert rule.tile(operand=1, dim=0).blocked.endswith("so it cannot be sliced along d1")


def test_constant_index_and_linalg_index_block():
    body = generic(["affine_map<(i, j) -> (i, 0)>", ID2], '["parallel", "parallel"]',
                   "%a : tensor<8x1xf32>", "tensor<8x4xf32>",
                   "^bb0(%v: f32, %o: f32):\n %i = linalg.index 1 : index\n %c = arith.index_cast %i : index to i32\n"
                   " %f = arith.sitofp %c : i32 to f32\n %s = arith.addf %v, %f : f32\n linalg.yield %s : f32")
    rule = rule_for(op_named(body, "linalg.generic", "%a: tensor<8x1xf32>"))
    assert rule.tile(operand=0, dim=1) == RuleOutcome.block(
        "linalg.generic: operand #0 (input 0) dim 1 is indexed by the constant 0, not a loop dim")
    assert rule.tile(result=0, dim=1).blocked.startswith(
        "linalg.generic: loop d1 cannot be tiled: the body reads linalg.index 1")
    assert rule.tile(result=0, dim=0) == RuleOutcome(loop=0, actions=(T(0),), slices=((0, 0), (1, 0)))


def test_transpose():
    rule = rule_for(op_named(
        "%e = tensor.empty() : tensor<8x4xf32>\n"
        "%t = linalg.transpose ins(%a : tensor<4x8xf32>) outs(%e : tensor<8x4xf32>) permutation = [1, 0]",
        "linalg.transpose", "%a: tensor<4x8xf32>"))
    assert rule.tile(operand=0, dim=0) == RuleOutcome(loop=1, actions=(T(1),), slices=((0, 0), (1, 1)))
    assert rule.tile(operand=0, dim=1) == RuleOutcome(loop=0, actions=(T(0),), slices=((0, 1), (1, 0)))


def test_explicit_entries():
    args = "%a: tensor<4x6xf32>, %c: tensor<4x6xf32>, %d: tensor<8x6xf32>"
    expand = rule_for(op_named("%e = tensor.expand_shape %a [[0, 1], [2]] output_shape [2, 2, 6] : "
                               "tensor<4x6xf32> into tensor<2x2x6xf32>", "tensor.expand_shape", args))
    assert expand.tile(operand=0, dim=0) == RuleOutcome(loop=0, actions=(T(0),), slices=((0, 0),))
    assert "result dim 1 is a minor dim of the expanded group [0, 1]" in expand.tile(result=0, dim=1).blocked
    assert expand.tile(result=0, dim=2) == RuleOutcome(loop=2, actions=(T(2),), slices=((0, 1),))
    collapse = rule_for(op_named("%f = tensor.collapse_shape %a [[0, 1]] : tensor<4x6xf32> into tensor<24xf32>",
                                 "tensor.collapse_shape", args))
    assert collapse.tile(result=0, dim=0) == RuleOutcome(loop=0, actions=(T(0),), slices=((0, 0),))
    assert "source dim 1 is a minor dim" in collapse.tile(operand=0, dim=1).blocked
    concat = rule_for(op_named("%g = tensor.concat dim(0) %a, %c : (tensor<4x6xf32>, tensor<4x6xf32>) -> "
                               "tensor<8x6xf32>", "tensor.concat", args))
    assert concat.tile(result=0, dim=1) == RuleOutcome(loop=1, actions=(T(1),), slices=((0, 1), (1, 1)))
    assert "concatenated dim" in concat.tile(result=0, dim=0).blocked
    extract = rule_for(op_named("%h = tensor.extract_slice %d[4, 0] [4, 6] [1, 1] : tensor<8x6xf32> to "
                                "tensor<4x6xf32>", "tensor.extract_slice", args))
    assert extract.tile(result=0, dim=1) == RuleOutcome(loop=1, actions=(T(1),), slices=((0, 1),))
    assert "cut by tensor.extract_slice (offset 4, size 4, stride 1)" in extract.tile(operand=0, dim=0).blocked
    add = rule_for(op_named("%j = arith.addf %a, %c : tensor<4x6xf32>", "arith.addf", args))
    assert add.tile(operand=1, dim=0) == RuleOutcome(loop=0, actions=(T(0),), slices=((0, 0), (1, 0)))
    empty = rule_for(op_named("%m = tensor.empty() : tensor<3x5xf32>", "tensor.empty", args))
    assert empty.tile(result=0, dim=1) == RuleOutcome(loop=1, actions=(T(1),))
    pad = rule_for(op_named("%z = arith.constant 0.0 : f32\n%p = tensor.pad %a low[1, 0] high[0, 0] {\n"
                            "^bb0(%i: index, %j: index):\n tensor.yield %z : f32\n} : tensor<4x6xf32> to "
                            "tensor<5x6xf32>",
                            "tensor.pad", args))
    assert pad.tile(operand=0, dim=1) == RuleOutcome(loop=1, actions=(T(1),), slices=((0, 1),))
    assert pad.tile(result=0, dim=1) == pad.tile(operand=0, dim=1)
    assert "padded by tensor.pad (low 1, high 0)" in pad.tile(result=0, dim=0).blocked
    with pytest.raises(NoRule, match="no propagation rule for 'tensor.bitcast'"):
        rule_for(op_named("%p = tensor.bitcast %a : tensor<4x6xf32> to tensor<4x6xi32>", "tensor.bitcast", args))


def test_reshapes_skip_unit_dims():
    """torch's keepdim reshapes and `[1, S, ...]` views: a unit dim before a dim of its group changes no offset,
    so the first non-unit dim of a group is the one that tiles (and the unit dims cannot be tiled at all)."""
    args = "%a: tensor<8x6xf32>, %b: tensor<1x8x6xf32>"
    expand = rule_for(op_named("%e = tensor.expand_shape %a [[0, 1], [2]] output_shape [1, 8, 6] : "
                               "tensor<8x6xf32> into tensor<1x8x6xf32>", "tensor.expand_shape", args))
    assert expand.tile(result=0, dim=1) == RuleOutcome(loop=1, actions=(T(1),), slices=((0, 0),))
    assert expand.tile(operand=0, dim=0) == expand.tile(result=0, dim=1)
    assert "result dim 0 is a minor dim of the expanded group [0, 1]" in expand.tile(result=0, dim=0).blocked
    keepdim = rule_for(op_named("%e = tensor.expand_shape %a [[0], [1, 2]] output_shape [8, 6, 1] : "
                                "tensor<8x6xf32> into tensor<8x6x1xf32>", "tensor.expand_shape", args))
    assert keepdim.tile(result=0, dim=1) == RuleOutcome(loop=1, actions=(T(1),), slices=((0, 1),))
    collapse = rule_for(op_named("%f = tensor.collapse_shape %b [[0, 1], [2]] : tensor<1x8x6xf32> into "
                                 "tensor<8x6xf32>", "tensor.collapse_shape", args))
    assert collapse.tile(result=0, dim=0) == RuleOutcome(loop=1, actions=(T(0),), slices=((0, 1),))


def test_rank_reducing_slices_are_the_pieces_of_a_split():
    """`t[:, i]` of a [B, 3, D] tensor (a fused QKV projection's pieces): the kept dims map in order, the dropped
    unit dim is cut."""
    args = "%t: tensor<4x3x16xf32>"
    extract = rule_for(op_named("%q = tensor.extract_slice %t[0, 1, 0] [4, 1, 16] [1, 1, 1] : tensor<4x3x16xf32> to "
                                "tensor<4x16xf32>", "tensor.extract_slice", args))
    assert extract.tile(result=0, dim=1) == RuleOutcome(loop=2, actions=(T(1),), slices=((0, 2),))
    assert extract.tile(result=0, dim=0) == RuleOutcome(loop=0, actions=(T(0),), slices=((0, 0),))
    assert "cut by tensor.extract_slice (offset 1, size 1, stride 1)" in extract.tile(operand=0, dim=1).blocked


def test_bad_questions_are_errors():
    rule = rule_for(reduction(" %r = arith.addf %acc, %v : f32\n linalg.yield %r : f32"))
    with pytest.raises(InternalError, match="exactly one of operand= or result="):
        rule.tile(dim=0)
    with pytest.raises(InternalError, match="there is no dim 2"):
        rule.tile(operand=0, dim=2)
    with pytest.raises(InternalError, match="there is no result #1"):
        rule.tile(result=1, dim=0)



def test_every_op_of_the_examples_has_a_rule():
    """The table covers the example programs with no per-op code, and blocks exactly what it must."""
    from pathlib import Path

    context = sd.make_context()
    blocked, names = [], set()
    with context, ir.Location.unknown():
        for path in sorted((Path(__file__).resolve().parents[3] / "examples").glob("*.mlir")):
            module = ir.Module.parse(path.read_text())
            for func in sd.walk_ops(module, "func.func"):
                for op in func.regions[0].blocks[0].operations:
                    op = op.operation
                    if op.name in ("func.return",
                                   ir_names.LOOP) or not isinstance(op.results[0].type, ir.RankedTensorType):
                        continue  # scalars are not partitioned; loops are already partitioned
                    rule = rule_for(op)
                    names.add(op.name)
                    for k, dims in enumerate(rule.operands):
                        for d in range(len(dims)):
                            outcome = rule.tile(operand=k, dim=d)
                            if not outcome.ok:
                                blocked.append((path.stem, op.name, k, d, outcome.blocked.split(": ", 1)[1]))
    assert names >= {"linalg.matmul", "linalg.batch_matmul", "linalg.generic", "linalg.transpose", "linalg.fill",
                     "tensor.empty", "tensor.expand_shape", "tensor.collapse_shape"}
    max_reason = ("loop d1 is a reduction and result #0's reduction combiner is arith.maximumf, not an addition, "
                  "so partial results cannot be added up")
    assert sorted(blocked) == sorted([
        # attention's row max: tiling the reduced dim of the scores
        ("attention", "linalg.generic", 0, 1, max_reason),
        # the softmax example's row max over dim 1
        ("softmax", "linalg.generic", 0, 1, max_reason),
        # multi-head attention's softmax max over the keys (dim 2 of the [h, s, t] scores)
        ("mha", "linalg.generic", 0, 2, max_reason.replace("loop d1", "loop d2")),
        # reshape: the minor dim of the collapsed 8x4 group sums (the expand_shape's column dim is the major
        # dim of its group [1, 2], so it tiles)
        ("reshape", "tensor.collapse_shape", 0, 1,
         "loop d1 cannot be tiled: source dim 1 is a minor dim of the collapsed group [0, 1]; "
         "only the major dim of a group (unit dims aside) can be tiled (the blocks of a minor dim are strided)"),
    ]), "\n".join(map(str, blocked))
