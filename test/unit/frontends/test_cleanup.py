"""The import-time cleanup on hand-written IR (no torch needed): aligned splits become pieces of an expanded
dim, the expansion reaches the producer's weight, and heads tiled after the split partition the projection
itself instead of gathering it."""

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


# One zero fill (the generic form the cleanup leaves) read through two reshapes, as ring attention reads the
# accumulator of its scores: [4, 2, 2] as [2, 2, 2, 2] and as [2, 8].
SHARED_FILL = """
func.func @f(%a: tensor<2x2x2x2xf32>, %b: tensor<2x8xf32>) -> (tensor<2x2x2x2xf32>, tensor<2x8xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x2x2xf32>
  %f = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>],
                       iterator_types = ["parallel", "parallel", "parallel"]} outs(%e : tensor<4x2x2xf32>) {
  ^bb0(%out: f32):
    linalg.yield %zero : f32
  } -> tensor<4x2x2xf32>
  %x = tensor.expand_shape %f [[0, 1], [2], [3]] output_shape [2, 2, 2, 2] : tensor<4x2x2xf32> into tensor<2x2x2x2xf32>
  %y = tensor.collapse_shape %f [[0], [1, 2]] : tensor<4x2x2xf32> into tensor<4x4xf32>
  %z = tensor.collapse_shape %y [[0, 1]] : tensor<4x4xf32> into tensor<16xf32>
  %w = tensor.expand_shape %z [[0, 1]] output_shape [2, 8] : tensor<16xf32> into tensor<2x8xf32>
  %s = arith.addf %x, %a : tensor<2x2x2x2xf32>
  %t = arith.addf %w, %b : tensor<2x8xf32>
  return %s, %t : tensor<2x2x2x2xf32>, tensor<2x8xf32>
}
"""


def test_each_reshape_of_a_fill_reads_a_fill_of_its_own_shape():
    """`fills_at_reshapes` (frontends/fills.py): no reshape of a fill is left, each reader gets a fill of the
    shape it reads (chains of reshapes too), and the program computes what it did."""
    with make_context():
        module = ir.Module.parse(SHARED_FILL)
        clean_up(module.operation)
        text = str(module)
        assert "tensor.expand_shape" not in text and "tensor.collapse_shape" not in text, text
        fills = [op for op in walk_ops(module.operation, "linalg.generic") if not op.operands[:-1]]
        assert sorted(str(op.results[0].type) for op in fills) == ["tensor<2x2x2x2xf32>", "tensor<2x8xf32>"]
    check_equivalent(SHARED_FILL, str(module), step="fills_at_reshapes")
