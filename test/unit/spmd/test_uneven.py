"""Dims that do not divide the mesh: padded blocks (docs/partition.md, "Uneven shapes").

Each program is compiled with `slicer.compile` and run by the simulator on random data, against numpy (or the
unpartitioned program through the JIT). The cases are those of issue 25: batch 3 on x=2 and 6 on x=4 (data
parallel), an MLP hidden 250 on y=4 (Megatron: the row-parallel contraction over the padded dim, all_reduce),
sequence 15 on y=2 under softmax and layer norm, reductions over a padded dim whose padding an elementwise op
has turned into non-zeros (exp) or infinities (1/x): the masks must keep it out, and a value tiled unevenly
then needed whole (all_gather, then trimmed).
"""

from pathlib import Path

import numpy as np
import pytest

import slicer
from example_modules import collective_ops
from slicer.checking import random_inputs
from slicer.core.errors import CompileError
from slicer.lowering import compile_function

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
T, R = slicer.Tile, slicer.Replicate

MLP = """
func.func @mlp(%x: tensor<{B}x16xf32>, %w1: tensor<16x{H}xf32>, %b1: tensor<{H}xf32>,
               %w2: tensor<{H}x16xf32>) -> tensor<{B}x16xf32> {{
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %e1 = tensor.empty() : tensor<{B}x{H}xf32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<{B}x{H}xf32>) -> tensor<{B}x{H}xf32>
  %h = linalg.matmul ins(%x, %w1 : tensor<{B}x16xf32>, tensor<16x{H}xf32>)
                     outs(%f1 : tensor<{B}x{H}xf32>) -> tensor<{B}x{H}xf32>
  %a = linalg.generic {{indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (j)>,
                                        affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}}
      ins(%h, %b1 : tensor<{B}x{H}xf32>, tensor<{H}xf32>) outs(%e1 : tensor<{B}x{H}xf32>) {{
  ^bb0(%hv: f32, %bv: f32, %o: f32):
    %s = arith.addf %hv, %bv : f32
    {ACT}
  }} -> tensor<{B}x{H}xf32>
  %e2 = tensor.empty() : tensor<{B}x16xf32>
  %f2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<{B}x16xf32>) -> tensor<{B}x16xf32>
  %y = linalg.matmul ins(%a, %w2 : tensor<{B}x{H}xf32>, tensor<{H}x16xf32>)
                     outs(%f2 : tensor<{B}x16xf32>) -> tensor<{B}x16xf32>
  return %y : tensor<{B}x16xf32>
}}
"""
RELU = "%r = arith.maximumf %s, %zero : f32\n    linalg.yield %r : f32"
RECIPROCAL = "%r = arith.divf %one, %s : f32\n    linalg.yield %r : f32"  # padding (0 + 0) becomes inf

EXP_ROW_SUM = """
func.func @exp_row_sum(%a: tensor<{R}x{C}xf32>) -> tensor<{R}xf32> {{
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<{R}x{C}xf32>
  %x = linalg.generic {{indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}}
      ins(%a : tensor<{R}x{C}xf32>) outs(%e : tensor<{R}x{C}xf32>) {{
  ^bb0(%v: f32, %o: f32):
    %ex = math.exp %v : f32
    linalg.yield %ex : f32
  }} -> tensor<{R}x{C}xf32>
  %r0 = tensor.empty() : tensor<{R}xf32>
  %f = linalg.fill ins(%zero : f32) outs(%r0 : tensor<{R}xf32>) -> tensor<{R}xf32>
  %s = linalg.generic {{indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>],
                       iterator_types = ["parallel", "reduction"]}}
      ins(%x : tensor<{R}x{C}xf32>) outs(%f : tensor<{R}xf32>) {{
  ^bb0(%v: f32, %acc: f32):
    %r = arith.addf %acc, %v : f32
    linalg.yield %r : f32
  }} -> tensor<{R}xf32>
  return %s : tensor<{R}xf32>
}}
"""


def mlp(batch: int, hidden: int, act: str = RELU) -> str:
    return MLP.format(B=batch, H=hidden, ACT=act)


def resized(name: str, rows: int, cols: int) -> str:
    """An example program of shape 8x16 with its sizes changed to rows x cols."""
    text = (EXAMPLES / f"{name}.mlir").read_text()
    return text.replace("8x16", f"{rows}x{cols}").replace("<16x", f"<{cols}x").replace("<8x", f"<{rows}x") \
        .replace("<16xf32>", f"<{cols}xf32>").replace("<8xf32>", f"<{rows}xf32>")


def mlp_numpy(x, w1, b1, w2, act=RELU):
    h = x @ w1 + b1
    return (np.maximum(h, 0) if act == RELU else 1 / h) @ w2


def mlp_inputs(batch: int, hidden: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s, dtype=np.float32) for s in ((batch, 16), (16, hidden), (hidden,), (hidden, 16))]


def run_against_jit(text: str, tactics, mesh: dict, seed: int = 1):
    """`text` compiled for `mesh` and simulated, and the unpartitioned program on the same random inputs."""
    reference = compile_function(text)
    inputs = random_inputs(reference.inputs, seed=seed)
    expected = reference(*inputs)
    actual = slicer.compile(text, mesh=mesh, tactics=tactics).run(*inputs)
    return expected, actual


@pytest.mark.parametrize("batch, mesh", [(3, {"x": 2}), (6, {"x": 4})])  # blocks 2, 1 and 2, 2, 2, 0
def test_data_parallel_batch_that_does_not_divide(batch, mesh):
    prog = slicer.compile(mlp(batch, 32), mesh=mesh, tactics=[T(arg=0, dim=0, axes="x")])
    inputs = mlp_inputs(batch, 32)
    out = prog.run(*inputs)
    assert out.shape == (batch, 16)
    np.testing.assert_allclose(out, mlp_numpy(*inputs), rtol=1e-5, atol=1e-5)
    assert "all_gather" not in prog.spmd  # nothing is gathered: the result keeps its padded blocks


def test_megatron_hidden_250_on_4_devices():
    prog = slicer.compile(mlp(8, 250), mesh={"y": 4}, tactics=[T(arg=1, dim=1, axes="y"), T(arg=3, dim=0, axes="y")])
    inputs = mlp_inputs(8, 250, seed=2)
    np.testing.assert_allclose(prog.run(*inputs), mlp_numpy(*inputs), rtol=1e-4, atol=1e-4)
    assert prog.spmd.count("shard.all_reduce") == 1 and "all_gather" not in prog.spmd


def test_contraction_over_padding_turned_into_infinities_is_masked():
    """1/(x w1 + b1) is inf in the padding; the row-parallel contraction masks both operands there."""
    tactics = [T(arg=1, dim=1, axes="y"), T(arg=3, dim=0, axes="y")]
    prog = slicer.compile(mlp(4, 10, RECIPROCAL), mesh={"y": 4}, tactics=tactics)  # blocks 3, 3, 3, 1
    inputs = mlp_inputs(4, 10, seed=3)
    out = prog.run(*inputs)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, mlp_numpy(*inputs, act=RECIPROCAL), rtol=1e-4, atol=1e-3)


GENERIC_MATMUL = """linalg.generic {{indexing_maps = [affine_map<(i, j, k) -> (i, k)>, affine_map<(i, j, k) -> (k, j)>,
                                        affine_map<(i, j, k) -> (i, j)>],
                       iterator_types = ["parallel", "parallel", "reduction"]}}
      ins(%a, %w2 : tensor<{B}x{H}xf32>, tensor<{H}x16xf32>) outs(%f2 : tensor<{B}x16xf32>) {{
  ^bb0(%av: f32, %wv: f32, %acc: f32):
    %m = arith.mulf %av, %wv : f32
    %t = arith.addf %acc, %m : f32
    linalg.yield %t : f32
  }} -> tensor<{B}x16xf32>"""


def test_generic_contraction_over_padding_keeps_its_gemm_body():
    """The row-parallel contraction written as a linalg.generic `acc + a * b` (as imports give it): its operands
    are zeroed in the padding, as a named one's, so its body stays `out + product` (a select there would take it
    off the packed GEMM: vocabulary-parallel LM heads, benchmarks/README.md); the padding's infinities stay out."""
    named = """linalg.matmul ins(%a, %w2 : tensor<{B}x{H}xf32>, tensor<{H}x16xf32>)
                     outs(%f2 : tensor<{B}x16xf32>) -> tensor<{B}x16xf32>"""
    assert named in MLP
    text = MLP.replace(named, GENERIC_MATMUL).format(B=4, H=10, ACT=RECIPROCAL)
    tactics = [T(arg=1, dim=1, axes="y"), T(arg=3, dim=0, axes="y")]
    prog = slicer.compile(text, mesh={"y": 4}, tactics=tactics)  # blocks 3, 3, 3, 1
    spmd = str(prog.spmd)
    body = spmd[spmd.index('iterator_types = ["parallel", "parallel", "reduction"]'):]
    assert "arith.mulf" in body[:body.index("linalg.yield")] and "arith.select" not in body[:body.index("linalg.yield")]
    inputs = mlp_inputs(4, 10, seed=3)
    out = prog.run(*inputs)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, mlp_numpy(*inputs, act=RECIPROCAL), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("cols, mesh", [(15, {"y": 4}), (5, {"y": 4})])  # blocks 4, 4, 4, 3 and 2, 2, 1, 0
def test_sum_over_padding_turned_into_ones_is_masked(cols, mesh):
    """exp(0) = 1 in the padding; the sum loop's reduction keeps its accumulator for the padded columns."""
    text = EXP_ROW_SUM.format(R=4, C=cols)
    expected, actual = run_against_jit(text, [T(arg=0, dim=1, axes="y")], mesh)
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["softmax", "layernorm"])
def test_sequence_15_on_2_devices_reduces_over_other_dims(name):
    text = resized(name, 15, 16)
    tactics = [T(arg=0, dim=0, axes="y")]
    expected, actual = run_against_jit(text, tactics, {"y": 2})
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)


def test_softmax_over_the_padded_dim():
    text = resized("softmax", 4, 15)
    expected, actual = run_against_jit(text, [T(arg=0, dim=1, axes="y")], {"y": 4})
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)


def test_value_tiled_unevenly_then_needed_whole_is_gathered_and_trimmed():
    prog = slicer.compile(mlp(3, 32), mesh={"x": 2}, tactics=[T(arg=0, dim=0, axes="x"), R(result=0)])
    inputs = mlp_inputs(3, 32, seed=4)
    np.testing.assert_allclose(prog.run(*inputs), mlp_numpy(*inputs), rtol=1e-5, atol=1e-5)
    assert prog.spmd.count("shard.all_gather") == 1


def test_uneven_2d_mesh_batch_and_hidden():
    tactics = [T(arg=0, dim=0, axes="x"), T(arg=1, dim=1, axes="y"), T(arg=3, dim=0, axes="y"), R(arg=2)]
    prog = slicer.compile(mlp(3, 10), mesh={"x": 2, "y": 4}, tactics=tactics)
    inputs = mlp_inputs(3, 10, seed=5)
    np.testing.assert_allclose(prog.run(*inputs), mlp_numpy(*inputs), rtol=1e-4, atol=1e-4)


def test_uneven_dim_over_two_axes_is_a_clear_error():
    with pytest.raises(CompileError, match="over one mesh axis"):
        slicer.compile(mlp(3, 32), mesh={"x": 2, "y": 2}, tactics=[T(arg=0, dim=0, axes=("x", "y"))])


def test_explain_memory_and_pictures_show_each_devices_block():
    prog = slicer.compile(mlp(3, 10), mesh={"x": 2, "y": 4},
                          tactics=[T(arg=0, dim=0, axes="x"), T(arg=1, dim=1, axes="y"), T(arg=3, dim=0, axes="y")])
    text = prog.explain()
    assert "arg #0: f32[3, 16] as [[x],[]] (local [2, 16]; dim 0: 3 over x=2: blocks 2, 1 (each padded to 2))" in text
    assert "dim 1: 10 over y=4: blocks 3, 3, 3, 1 (each padded to 3)" in text
    assert "result #0: [3, 16] as [[x],[]] (default; dim 0: 3 over x=2: blocks 2, 1" in text
    memory = prog.memory().text()
    # a device holds its padded block (2 rows of 16 f32), the unpartitioned program the 3 logical rows
    assert "128 B of 192 B" in memory
    picture = prog.picture("w1").text()
    assert "f32[16, 10]" in picture and "4 blocks over y holding 3, 3, 3, 1, each padded to 3" in picture
    assert "9:10" in picture  # the last block's rows end at the logical size


@pytest.mark.slow
def test_torch_mlp_batch_3_data_parallel_and_hidden_30_megatron():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 30), torch.nn.GELU(), torch.nn.Linear(30, 8), torch.nn.LayerNorm(8))
    x = torch.randn(3, 16)
    program = slicer.from_torch(model, x)
    want = model(x).detach().numpy()
    data = slicer.compile(program, mesh={"x": 2}, tactics=slicer.parse_tactics("input.0=x"))
    np.testing.assert_allclose(data.run(x), want, rtol=1e-5, atol=1e-5)
    assert "shard.all_" not in data.spmd  # no collective at all
    megatron = slicer.compile(program, mesh={"y": 4},
                              tactics=slicer.parse_tactics("0.weight.0=y;0.bias.0=y;2.weight.1=y"))
    np.testing.assert_allclose(megatron.run(x), want, rtol=1e-5, atol=1e-5)  # hidden 30: blocks 8, 8, 8, 6
    assert megatron.spmd.count("shard.all_reduce") == 1


@pytest.mark.parametrize("propagate", [False, True])
def test_loop_programs_with_padded_blocks_run_sequentially(propagate):
    """The loop program (before partitioning) keeps its sequential meaning: slices pad, tile loops trim, and
    the sum loop's reduction over a padded block is masked (slicer-lower-to-loops, what --check-each-step runs)."""
    from slicer.passes import transform
    for text, tactics, mesh in ((EXP_ROW_SUM.format(R=4, C=7), [T(arg=0, dim=1, axes="y")], {"y": 4}),
                                (mlp(3, 10, RECIPROCAL), [T(arg=0, dim=0, axes="x"), T(arg=1, dim=1, axes="y"),
                                                          T(arg=3, dim=0, axes="y")], {"x": 2, "y": 4})):
        loops = str(slicer.apply_tactics(text, tactics, mesh=mesh))
        if propagate:
            loops = transform(loops, "slicer-propagate")
        reference, candidate = compile_function(text), compile_function(loops)
        inputs = random_inputs(reference.inputs, seed=6)
        np.testing.assert_allclose(candidate(*inputs), reference(*inputs), rtol=1e-5, atol=1e-4)


COLLAPSE = """
func.func @flat(%a: tensor<3x4xf32>) -> tensor<12xf32> {
  %e = tensor.empty() : tensor<3x4xf32>
  %t = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%a : tensor<3x4xf32>) outs(%e : tensor<3x4xf32>) {
  ^bb0(%v: f32, %o: f32):
    %ex = math.exp %v : f32
    linalg.yield %ex : f32
  } -> tensor<3x4xf32>
  %c = tensor.collapse_shape %t [[0, 1]] : tensor<3x4xf32> into tensor<12xf32>
  return %c : tensor<12xf32>
}
"""


def test_reshape_merging_a_padded_dim_takes_it_whole():
    """A collapse of the padded dim is not put in the loop (it would mix padding into real rows): the exp runs
    on padded blocks, and the collapse reads the value gathered whole and trimmed."""
    expected, actual = run_against_jit(COLLAPSE, [T(arg=0, dim=0, axes="x")], {"x": 2})
    np.testing.assert_allclose(actual, expected, rtol=1e-6)


KEEPS_PADDED_DIM = """
func.func @f(%a: tensor<2x3x7xf32>) -> tensor<6x7xf32> {
  %c = tensor.collapse_shape %a [[0, 1], [2]] : tensor<2x3x7xf32> into tensor<6x7xf32>
  %e = tensor.empty() : tensor<6x7xf32>
  %x = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%c : tensor<6x7xf32>) outs(%e : tensor<6x7xf32>) {
  ^bb0(%v: f32, %o: f32):
    %ex = math.exp %v : f32
    linalg.yield %ex : f32
  } -> tensor<6x7xf32>
  return %x : tensor<6x7xf32>
}
"""


def test_reshape_leaving_the_padded_dim_alone_keeps_its_blocks():
    """A collapse of the other dims (an LM head's [B, S, V] logits into [B*S, V], V tiled unevenly) passes the
    padded blocks through: no collective, the result still tiled."""
    prog = slicer.compile(KEEPS_PADDED_DIM, mesh={"x": 2}, tactics=[T(arg=0, dim=2, axes="x")])
    assert collective_ops(prog) == []
    assert "dim 1: 7 over x=2: blocks 4, 3" in prog.explain()
    a = np.random.default_rng(0).standard_normal((2, 3, 7), dtype=np.float32)
    np.testing.assert_allclose(prog.run(a), np.exp(a.reshape(6, 7)), rtol=1e-6)


HAND_WRITTEN_RESHAPE = """
"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 2>} : () -> ()
func.func @f(%a: tensor<3x4xf32>) -> tensor<12xf32> {
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    %b = "slicer.slice"(%a, %r) {dim = 0 : i64} : (tensor<3x4xf32>, !slicer.range<"x", 2>) -> tensor<2x4xf32>
    %c = tensor.collapse_shape %b [[0, 1]] : tensor<2x4xf32> into tensor<8xf32>
    tosa.yield %c : tensor<8xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<12xf32>
  return %0 : tensor<12xf32>
}
"""


def test_partitioner_refuses_a_reshape_of_padded_blocks():
    from mlir import ir

    from slicer.passes import transform
    with pytest.raises(ir.MLIRError, match="'tensor.collapse_shape' cannot compute on padded blocks: operand #0 "
                                            "holds padded blocks on dim 0 \\(size 3 cut over \\[x\\]"):
        transform(HAND_WRITTEN_RESHAPE, "slicer-partition")


@pytest.mark.parametrize("batch", [5, 3])
def test_reshard_between_two_uneven_tilings(batch):
    """Batch tiled over x=2 by the tactic, the result requested over y=4: 5 rows are padded to 6 over x and to
    8 over y (gathered whole, trimmed, padded again, sliced); 3 rows are padded to 4 either way (one plan)."""
    tactics = [T(arg=0, dim=0, axes="x"), T(result=0, dim=0, axes="y")]
    prog = slicer.compile(mlp(batch, 8), mesh={"x": 2, "y": 4}, tactics=tactics)
    inputs = mlp_inputs(batch, 8, seed=7)
    np.testing.assert_allclose(prog.run(*inputs), mlp_numpy(*inputs), rtol=1e-5, atol=1e-5)
    assert ("shard.all_gather" in prog.spmd) == (batch == 5)  # 5: gathered whole, then trimmed and padded to 8


def attention(seq: int) -> str:
    text = (EXAMPLES / "attention.mlir").read_text()
    return text.replace("16x8", "16xS").replace("8x16", "Sx16").replace("8x8", "SxS").replace("8xf32", "Sxf32") \
        .replace("S", str(seq))


@pytest.mark.parametrize("tactics, mesh", [
    ([T(arg=0, dim=0, axes="y"), T(arg=1, dim=0, axes="y"), T(arg=2, dim=0, axes="y")], {"y": 2}),
    ([T(arg=1, dim=0, axes="y"), T(arg=2, dim=0, axes="y")], {"y": 4}),  # softmax and p @ v over padded keys
], ids=["sequence-parallel", "keys-and-values"])
@pytest.mark.slow
def test_attention_with_sequence_15(tactics, mesh):
    """Fills into padded blocks of values used by later kernels once crossed a collective unexported."""
    expected, actual = run_against_jit(attention(15), tactics, mesh)
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)


def transpose(rows: int, cols: int) -> str:
    text = (EXAMPLES / "transpose.mlir").read_text()
    return text.replace("16x8", "CxR").replace("8x16", "RxC").replace("8x4", "Rx5").replace("16x4", "Cx5") \
        .replace("R", str(rows)).replace("C", str(cols))


UNEVEN_2D = {  # the 2-D strategies of test_partition_tactics_programs on 7 x 15 arrays over x=2, y=4
    "layernorm": (lambda: resized("layernorm", 7, 15),
                  [T(arg=0, dim=0, axes="x"), T(arg=0, dim=1, axes="y"), T(arg=1, dim=0, axes="y"), R(arg=2)]),
    "reduction": (lambda: resized("reduction", 7, 15),
                  [T(arg=0, dim=0, axes="x"), T(arg=0, dim=1, axes="y"), T(result=0, dim=0, axes="y")]),
    "softmax": (lambda: resized("softmax", 7, 15),
                [T(arg=0, dim=0, axes="x"), T(arg=0, dim=1, axes="y"), T(result=0, dim=1, axes="x")]),
    "transpose": (lambda: transpose(7, 15), [T(arg=0, dim=0, axes="x"), T(arg=1, dim=1, axes="y")]),
}


@pytest.mark.parametrize("propagate", [False, True], ids=["tactics", "propagated"])
@pytest.mark.parametrize("name", sorted(UNEVEN_2D))
def test_uneven_2d_strategies_with_and_without_propagation(name, propagate):
    """Rows 7 over x=2 (blocks 4, 3) and columns 15 over y=4 (blocks 4, 4, 4, 3): a tile loop's padded result
    sliced again over another dim, reductions over padded columns (layer norm's mean and variance, the row
    sums, softmax's max and sum) and results requested over other axes."""
    from slicer.passes import transform
    from slicer.runtime.simulation.oracle import compare
    make, tactics = UNEVEN_2D[name]
    text = make()
    loops = str(slicer.apply_tactics(text, tactics, mesh={"x": 2, "y": 4}))
    if propagate:
        loops = transform(loops, "slicer-propagate")
    reference = compile_function(text)
    inputs = random_inputs(reference.inputs, seed=8)
    result = compare(text, transform(loops, "slicer-partition"), inputs=inputs, reference=reference)
    for e, a in zip(result.expected, result.actual):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5)
