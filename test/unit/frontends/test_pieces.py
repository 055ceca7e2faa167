"""Slices of slices in the import-time cleanup (slicer/frontends/pieces.py), on hand-written IR (no torch
needed): GPT-NeoX's partial rotary cuts Q out of a fused projection, the rotated part out of Q, and
rotate_half's halves out of that. Each rewrite leaves a module that verifies and computes what it did before
(the JIT on random inputs); a step that breaks the module is an InternalError naming the op and the line."""

import pytest
from mlir import ir

import slicer
from slicer.checking import check_equivalent
from slicer.core.errors import InternalError
from slicer.dialect import make_context, walk_ops
from slicer.frontends import split_into_pieces
from slicer.frontends.cleanup import checked_step, clean_up
from slicer.frontends.pieces import aligned_piece, concat_as_stack

# A [4, 48] projection cut into q, k, v of 16; q's first 4 columns rotated (q[:, :4]) and its other 12 passed
# (unaligned: left alone); rotate_half of the rotated part: cat(-x2, x1) of its halves of 2. k is cut after
# q's slices: its group's expand_shape must still come before q's.
ROTARY = """
func.func @rotary(%p: tensor<4x48xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>) {
  %q = tensor.extract_slice %p[0, 0] [4, 16] [1, 1] : tensor<4x48xf32> to tensor<4x16xf32>
  %rot = tensor.extract_slice %q[0, 0] [4, 4] [1, 1] : tensor<4x16xf32> to tensor<4x4xf32>
  %pass = tensor.extract_slice %q[0, 4] [4, 12] [1, 1] : tensor<4x16xf32> to tensor<4x12xf32>
  %k = tensor.extract_slice %p[0, 16] [4, 16] [1, 1] : tensor<4x48xf32> to tensor<4x16xf32>
  %x1 = tensor.extract_slice %rot[0, 0] [4, 2] [1, 1] : tensor<4x4xf32> to tensor<4x2xf32>
  %x2 = tensor.extract_slice %rot[0, 2] [4, 2] [1, 1] : tensor<4x4xf32> to tensor<4x2xf32>
  %e = tensor.empty() : tensor<4x2xf32>
  %neg = linalg.negf ins(%x2 : tensor<4x2xf32>) outs(%e : tensor<4x2xf32>) -> tensor<4x2xf32>
  %half = tensor.concat dim(1) %neg, %x1 : (tensor<4x2xf32>, tensor<4x2xf32>) -> tensor<4x4xf32>
  %qr = tensor.concat dim(1) %half, %pass : (tensor<4x4xf32>, tensor<4x12xf32>) -> tensor<4x16xf32>
  %v = tensor.extract_slice %p[0, 32] [4, 16] [1, 1] : tensor<4x48xf32> to tensor<4x16xf32>
  return %qr, %k, %v : tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>
}
"""

# Pieces along two dims: rows of a piece of columns, and columns of a piece of rows.
TWO_DIMS = """
func.func @grid(%t: tensor<8x12xf32>) -> (tensor<4x6xf32>, tensor<4x6xf32>, tensor<2x12xf32>, tensor<2x3xf32>) {
  %left = tensor.extract_slice %t[0, 0] [8, 6] [1, 1] : tensor<8x12xf32> to tensor<8x6xf32>
  %top_left = tensor.extract_slice %left[0, 0] [4, 6] [1, 1] : tensor<8x6xf32> to tensor<4x6xf32>
  %bottom_left = tensor.extract_slice %left[4, 0] [4, 6] [1, 1] : tensor<8x6xf32> to tensor<4x6xf32>
  %rows = tensor.extract_slice %t[6, 0] [2, 12] [1, 1] : tensor<8x12xf32> to tensor<2x12xf32>
  %cell = tensor.extract_slice %rows[0, 9] [2, 3] [1, 1] : tensor<2x12xf32> to tensor<2x3xf32>
  return %top_left, %bottom_left, %rows, %cell : tensor<4x6xf32>, tensor<4x6xf32>, tensor<2x12xf32>, tensor<2x3xf32>
}
"""


def _slices_read_expansions(module) -> list[str]:
    """The text of every extract_slice that is an aligned piece but does not read an expand_shape (none, once
    every piece is rewritten)."""
    return [str(op) for op in walk_ops(module.operation, "tensor.extract_slice")
            if aligned_piece(op) is not None]


@pytest.mark.parametrize("text, rewritten", [(ROTARY, 6), (TWO_DIMS, 5)], ids=["rotary", "two-dims"])
def test_slices_of_slices_become_pieces_of_pieces(text, rewritten):
    with make_context():
        module = ir.Module.parse(text)
        assert split_into_pieces(module.operation) == rewritten
        assert module.operation.verify()
        assert _slices_read_expansions(module) == []  # applied again: nothing left to rewrite
        assert split_into_pieces(module.operation) == 0
        after = str(module)
    check_equivalent(text, after, step="split_into_pieces")


def test_the_whole_cleanup_keeps_slices_of_slices_equivalent():
    with make_context():
        module = ir.Module.parse(ROTARY)
        clean_up(module.operation)
        after = str(module)
    check_equivalent(ROTARY, after, step="clean_up")


def test_new_ops_keep_the_location_of_the_slice_they_replace():
    text = ROTARY.replace("[1, 1] : tensor<4x4xf32> to tensor<4x2xf32>",
                          '[1, 1] : tensor<4x4xf32> to tensor<4x2xf32> loc("model.py":7:0)')
    with make_context():
        module = ir.Module.parse(text)
        split_into_pieces(module.operation)
        halves = [op for op in walk_ops(module.operation)
                  if "4x2xf32" in str(op.results[0].type if len(op.results) else "")
                  and op.name in ("tensor.extract_slice", "tensor.expand_shape")]
        assert halves and all(str(op.location) == 'loc("model.py":7:0)' for op in halves)


def test_a_step_that_breaks_the_module_is_an_internal_error_naming_the_op_and_line():
    """A use moved above its definition (what the old cleanup did to a slice of a slice): the verifier's
    complaint becomes an InternalError with the op, the model's line and the way around it."""
    text = """
func.func @f(%t: tensor<4x8xf32>) -> tensor<4x2xf32> {
  %a = tensor.extract_slice %t[0, 0] [4, 4] [1, 1] : tensor<4x8xf32> to tensor<4x4xf32> loc("model.py":3:0)
  %b = tensor.extract_slice %a[0, 0] [4, 2] [1, 1] : tensor<4x4xf32> to tensor<4x2xf32>
      loc(callsite("model.py":5:0 at "train.py":9:0))
  return %b : tensor<4x2xf32>
}
"""

    def misplace(module):
        first, second = list(walk_ops(module, "tensor.extract_slice"))
        second.move_before(first)

    with make_context():
        module = ir.Module.parse(text)
        with pytest.raises(InternalError) as caught:
            checked_step(module.operation, "misplace", misplace)
    message = str(caught.value)
    assert "'tensor.extract_slice' at model.py:5" in message and "does not dominate" in message
    assert "step 'misplace'" in message and "cleanup=False" in message


# The backward of `q, k, v = qkv.split(16, dim=1)`: the gradients of the pieces concatenated, then the weight's
# gradient (a contraction over the rows) and the input's (over the columns).
CONCAT = """
func.func @backward(%dq: tensor<8x16xf32>, %dk: tensor<8x16xf32>, %dv: tensor<8x16xf32>, %x: tensor<8x4xf32>,
                    %w: tensor<48x4xf32>) -> (tensor<48x4xf32>, tensor<8x4xf32>) {
  %zero = arith.constant 0.0 : f32
  %d = tensor.concat dim(1) %dq, %dk, %dv : (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x48xf32>
  %e = tensor.empty() : tensor<48x8xf32>
  %dt = linalg.transpose ins(%d : tensor<8x48xf32>) outs(%e : tensor<48x8xf32>) permutation = [1, 0]
  %ew = tensor.empty() : tensor<48x4xf32>
  %fw = linalg.fill ins(%zero : f32) outs(%ew : tensor<48x4xf32>) -> tensor<48x4xf32>
  %dw = linalg.matmul ins(%dt, %x : tensor<48x8xf32>, tensor<8x4xf32>) outs(%fw : tensor<48x4xf32>) -> tensor<48x4xf32>
  %ex = tensor.empty() : tensor<8x4xf32>
  %fx = linalg.fill ins(%zero : f32) outs(%ex : tensor<8x4xf32>) -> tensor<8x4xf32>
  %dx = linalg.matmul ins(%d, %w : tensor<8x48xf32>, tensor<48x4xf32>) outs(%fx : tensor<8x4xf32>) -> tensor<8x4xf32>
  return %dw, %dx : tensor<48x4xf32>, tensor<8x4xf32>
}
"""


def test_a_concat_of_equal_pieces_becomes_a_stack_that_both_consumers_read():
    """Each consumer gets a collapse of its own (fusion folds single-use reshapes only), so after the cleanup both
    contractions read the stack `[8, 3, 16]`: the pieces' dim is a loop of each, and the weight is read as
    `[3, 16, 4]` (its gradient computed as `[3, 16, 4]`, collapsed at the end)."""
    with make_context():
        module = ir.Module.parse(CONCAT)
        assert concat_as_stack(module.operation) == 1
        assert module.operation.verify()
        assert "(tensor<8x1x16xf32>, tensor<8x1x16xf32>, tensor<8x1x16xf32>) -> tensor<8x3x16xf32>" in str(module)
        module = ir.Module.parse(CONCAT)
        clean_up(module.operation)
        cleaned = str(module)
        contractions = [op for op in walk_ops(module.operation, "linalg.generic") if len(op.operands) == 3]
        assert len(contractions) == 2 and all("8x3x16" in str(op.operands[0].type) for op in contractions)
    check_equivalent(CONCAT, cleaned, step="clean_up")


def test_propagation_tiles_the_pieces_dim_through_the_stack():
    """The pieces' gradients tiled on their columns (the heads): as a concat, the concatenated dim could not be
    tiled and the pieces were gathered; as a stack nothing is gathered (the input's gradient sums over the tiled
    columns: one all_reduce)."""
    text = CONCAT.replace("(tensor<48x4xf32>, tensor<8x4xf32>) {", "tensor<8x4xf32> {").replace(
        "return %dw, %dx : tensor<48x4xf32>, tensor<8x4xf32>", "return %dx : tensor<8x4xf32>")
    with make_context():
        module = ir.Module.parse(text)
        clean_up(module.operation)
        cleaned = str(module)
    tactics = slicer.parse_tactics("arg0.1=y;arg1.1=y;arg2.1=y")
    explained = slicer.compile(cleaned, mesh=slicer.Mesh(y=2), tactics=tactics).explain()
    assert "all_gather" not in explained and "total: 1 collectives" in explained


def test_concats_of_unequal_or_unit_pieces_are_left_alone():
    text = """
func.func @f(%a: tensor<4x2xf32>, %b: tensor<4x6xf32>, %c: tensor<4x1xf32>) -> (tensor<4x8xf32>, tensor<4x2xf32>) {
  %u = tensor.concat dim(1) %a, %b : (tensor<4x2xf32>, tensor<4x6xf32>) -> tensor<4x8xf32>
  %v = tensor.concat dim(1) %c, %c : (tensor<4x1xf32>, tensor<4x1xf32>) -> tensor<4x2xf32>
  return %u, %v : tensor<4x8xf32>, tensor<4x2xf32>
}
"""
    with make_context():
        assert concat_as_stack(ir.Module.parse(text).operation) == 0
