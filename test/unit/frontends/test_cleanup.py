"""The import-time cleanup on hand-written IR (no torch needed): aligned splits become pieces of an expanded
dim, the expansion reaches the producer's weight, and heads tiled after the split partition the projection
itself instead of gathering it."""

import warnings

from mlir import ir

import slicer
from slicer.checking import check_equivalent
from slicer.core.names import LOOP
from slicer.dialect import make_context, walk_ops
from slicer.frontends import clean_up, split_into_pieces

# A fused projection [8, 16] x [16, 48] cut into three pieces of 16 columns, each reshaped into 4 heads of 4.
FUSED = """
func.func @qkv(%x: tensor<8x16xf32>, %w: tensor<16x48xf32>) -> (tensor<8x4x4xf32>, tensor<8x4x4xf32>, tensor<8x4x4xf32>)
    {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x48xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<8x48xf32>) -> tensor<8x48xf32>
  %p = linalg.matmul ins(%x, %w : tensor<8x16xf32>, tensor<16x48xf32>) outs(%f : tensor<8x48xf32>) -> tensor<8x48xf32>
  %q = tensor.extract_slice %p[0, 0] [8, 16] [1, 1] : tensor<8x48xf32> to tensor<8x16xf32>
  %k = tensor.extract_slice %p[0, 16] [8, 16] [1, 1] : tensor<8x48xf32> to tensor<8x16xf32>
  %v = tensor.extract_slice %p[0, 32] [8, 16] [1, 1] : tensor<8x48xf32> to tensor<8x16xf32>
  %qh = tensor.expand_shape %q [[0], [1, 2]] output_shape [8, 4, 4] : tensor<8x16xf32> into tensor<8x4x4xf32>
  %kh = tensor.expand_shape %k [[0], [1, 2]] output_shape [8, 4, 4] : tensor<8x16xf32> into tensor<8x4x4xf32>
  %vh = tensor.expand_shape %v [[0], [1, 2]] output_shape [8, 4, 4] : tensor<8x16xf32> into tensor<8x4x4xf32>
  return %qh, %kh, %vh : tensor<8x4x4xf32>, tensor<8x4x4xf32>, tensor<8x4x4xf32>
}
"""


def test_aligned_splits_become_pieces_of_an_expanded_dim():
    with make_context():
        module = ir.Module.parse(FUSED)
        assert split_into_pieces(module.operation) == 3
        module.operation.verify()
        text = str(module)
        assert text.count("tensor.expand_shape %") == 4  # one for the split, three for the heads
        assert "tensor<8x48xf32> into tensor<8x3x16xf32>" in text
        assert "[8, 1, 16] [1, 1, 1] : tensor<8x3x16xf32> to tensor<8x16xf32>" in text
    check_equivalent(FUSED, text, step="split_into_pieces")


def test_unaligned_or_whole_slices_are_left_alone():
    text = """
func.func @f(%t: tensor<8x48xf32>) -> (tensor<8x20xf32>, tensor<8x48xf32>, tensor<8x1xf32>) {
  %a = tensor.extract_slice %t[0, 8] [8, 20] [1, 1] : tensor<8x48xf32> to tensor<8x20xf32>
  %b = tensor.extract_slice %t[0, 0] [8, 48] [1, 1] : tensor<8x48xf32> to tensor<8x48xf32>
  %c = tensor.extract_slice %t[0, 5] [8, 1] [1, 1] : tensor<8x48xf32> to tensor<8x1xf32>
  return %a, %b, %c : tensor<8x20xf32>, tensor<8x48xf32>, tensor<8x1xf32>
}
"""
    with make_context():
        module = ir.Module.parse(text)
        assert split_into_pieces(module.operation) == 0


def test_heads_after_the_split_partition_the_fused_projection():
    """After the cleanup the weight is read as [16, 3, 16]: tiling the heads of Q, K and V slices the weight's
    per-piece columns locally (no collective) and computes only the device's heads of the projection."""
    with make_context():
        module = ir.Module.parse(FUSED)
        clean_up(module.operation)
        cleaned = str(module)
        assert "tensor<16x48xf32> into tensor<16x3x16xf32>" in cleaned
        assert not list(walk_ops(module.operation, "linalg.matmul"))  # generalized, fused with the expansion
    check_equivalent(FUSED, cleaned, step="clean_up")
    tactics = slicer.parse_tactics("result0.1=y;result1.1=y;result2.1=y")
    prog = slicer.compile(cleaned, mesh=slicer.Mesh(y=2), tactics=tactics)
    assert "total: 0 collectives" in prog.explain()
    with make_context():
        module = slicer.apply_tactics(ir.Module.parse(cleaned), tactics, mesh={"y": 2})
        slicer.propagate(module)
        projections = [op for op in walk_ops(module.operation, "linalg.generic")
                       if any("16x3x" in str(v.type) for v in op.operands)]  # reads the weight as [16, 3, 16]
        assert projections and all(op.parent.name == LOOP for op in projections)


# The backward of two linear layers (q and k) on one input as torch-mlir writes it: the activations [B, S, D]
# collapsed to [B * S, D] once and read by both weights' gradients (contractions over the rows), each output
# gradient [B, S, H, E] collapsed once and read by its weight's gradient and its bias's (sums over the rows).
SHARED_COLLAPSE = """
#r = affine_map<(d0, d1, d2) -> (d2, d0)>
#c = affine_map<(d0, d1, d2) -> (d2, d1)>
#o = affine_map<(d0, d1, d2) -> (d0, d1)>
#i = affine_map<(d0, d1) -> (d0, d1)>
#s = affine_map<(d0, d1) -> (d1)>
func.func @grads(%x: tensor<2x8x16xf32>, %dq: tensor<2x8x4x4xf32>, %dk: tensor<2x8x4x4xf32>) ->
    (tensor<16x16xf32>, tensor<16xf32>, tensor<16x16xf32>, tensor<16xf32>) {
  %zero = arith.constant 0.0 : f32
  %rows = tensor.collapse_shape %x [[0, 1], [2]] : tensor<2x8x16xf32> into tensor<16x16xf32>
  %e = tensor.empty() : tensor<16x16xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<16x16xf32>) -> tensor<16x16xf32>
  %e3 = tensor.empty() : tensor<16xf32>
  %f3 = linalg.fill ins(%zero : f32) outs(%e3 : tensor<16xf32>) -> tensor<16xf32>
  %qrows = tensor.collapse_shape %dq [[0, 1], [2, 3]] : tensor<2x8x4x4xf32> into tensor<16x16xf32>
  %dwq = linalg.generic {indexing_maps = [#r, #c, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%qrows, %rows : tensor<16x16xf32>, tensor<16x16xf32>) outs(%f : tensor<16x16xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<16x16xf32>
  %dbq = linalg.generic {indexing_maps = [#i, #s], iterator_types = ["reduction", "parallel"]}
      ins(%qrows : tensor<16x16xf32>) outs(%f3 : tensor<16xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %s = arith.addf %a, %acc : f32
    linalg.yield %s : f32
  } -> tensor<16xf32>
  %krows = tensor.collapse_shape %dk [[0, 1], [2, 3]] : tensor<2x8x4x4xf32> into tensor<16x16xf32>
  %dwk = linalg.generic {indexing_maps = [#r, #c, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%krows, %rows : tensor<16x16xf32>, tensor<16x16xf32>) outs(%f : tensor<16x16xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<16x16xf32>
  %dbk = linalg.generic {indexing_maps = [#i, #s], iterator_types = ["reduction", "parallel"]}
      ins(%krows : tensor<16x16xf32>) outs(%f3 : tensor<16xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %s = arith.addf %a, %acc : f32
    linalg.yield %s : f32
  } -> tensor<16xf32>
  return %dwq, %dbq, %dwk, %dbk : tensor<16x16xf32>, tensor<16xf32>, tensor<16x16xf32>, tensor<16xf32>
}
"""


def test_a_collapse_read_twice_expands_both_readers_so_a_tiled_sequence_passes():
    """Each reader of the shared collapse iterates over [B, S] after the cleanup (no collapse is left), so tiling
    S, the minor dim of the collapsed group, partitions both: partial sums all_reduced, nothing gathered."""
    with make_context():
        module = ir.Module.parse(SHARED_COLLAPSE)
        clean_up(module.operation)
        cleaned = str(module)
        collapsed = [op.operands[0].type for op in walk_ops(module.operation, "tensor.collapse_shape")]
        assert all(t.shape[0] == 4 for t in collapsed), cleaned  # the gradients [4, 4, ..] as returned, no input
    check_equivalent(SHARED_COLLAPSE, cleaned, step="clean_up")
    with warnings.catch_warnings():
        warnings.simplefilter("error", slicer.DegradedStrategy)
        prog = slicer.compile(cleaned, mesh=slicer.Mesh(x=2),
                              tactics=slicer.parse_tactics("arg0.1=x;arg1.1=x;arg2.1=x"))
    assert "all_gather" not in prog.explain() and "all_reduce" in prog.explain()
