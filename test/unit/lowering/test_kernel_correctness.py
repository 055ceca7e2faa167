"""Compiled kernels (vectorized default pipeline) equal numpy on matmuls, chains, reductions."""

import subprocess
import sys

import numpy as np
import pytest

from slicer.lowering import LOOPS_PIPELINE, compile_kernel, compile_library

RNG = np.random.default_rng(0)


def matmul_fn(name, m, k, n, dtype="f32"):
    return f"""
func.func @{name}(%a: tensor<{m}x{k}x{dtype}>, %b: tensor<{k}x{n}x{dtype}>) -> tensor<{m}x{n}x{dtype}> {{
  %e = tensor.empty() : tensor<{m}x{n}x{dtype}>
  %z = arith.constant 0.0 : {dtype}
  %f = linalg.fill ins(%z : {dtype}) outs(%e : tensor<{m}x{n}x{dtype}>) -> tensor<{m}x{n}x{dtype}>
  %p = linalg.matmul ins(%a, %b : tensor<{m}x{k}x{dtype}>, tensor<{k}x{n}x{dtype}>) outs(%f : tensor<{m}x{n}x{dtype}>)
      -> tensor<{m}x{n}x{dtype}>
  return %p : tensor<{m}x{n}x{dtype}>
}}
"""


# Multiples of the 8x32x16 tiles, non-multiples in each dim (peeled remainders), tiny and skinny shapes.
MATMUL_SHAPES = [(64, 64, 64), (100, 70, 130), (17, 33, 5), (1, 1, 1), (8, 200, 3), (3, 7, 257)]


def test_matmuls_of_many_shapes_equal_numpy(cache_dir):
    text = "\n".join(matmul_fn(f"mm_{m}_{k}_{n}", m, k, n) for m, k, n in MATMUL_SHAPES)
    library = compile_library(text, cache_dir=cache_dir)
    assert len(library) == len(MATMUL_SHAPES)
    for m, k, n in MATMUL_SHAPES:
        a = RNG.standard_normal((m, k), dtype=np.float32)
        b = RNG.standard_normal((k, n), dtype=np.float32)
        result = library[f"mm_{m}_{k}_{n}"](a, b)
        np.testing.assert_allclose(result, a @ b, rtol=1e-4, atol=1e-4, err_msg=f"{m}x{k}x{n}")


def test_f64_matmul_and_transposed_operand(cache_dir):
    text = matmul_fn("mm64", 40, 24, 50, "f64") + """
func.func @mm_bt(%a: tensor<37x19xf32>, %b: tensor<45x19xf32>) -> tensor<37x45xf32> {
  %e = tensor.empty() : tensor<37x45xf32>
  %z = arith.constant 0.0 : f32
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<37x45xf32>) -> tensor<37x45xf32>
  %p = linalg.generic {indexing_maps = [affine_map<(i, j, k) -> (i, k)>, affine_map<(i, j, k) -> (j, k)>,
      affine_map<(i, j, k) -> (i, j)>],
                       iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%a, %b : tensor<37x19xf32>, tensor<45x19xf32>) outs(%f : tensor<37x45xf32>) {
  ^bb0(%x: f32, %y: f32, %acc: f32):
    %m = arith.mulf %x, %y : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<37x45xf32>
  return %p : tensor<37x45xf32>
}
"""
    library = compile_library(text, cache_dir=cache_dir)
    a, b = RNG.standard_normal((40, 24)), RNG.standard_normal((24, 50))
    np.testing.assert_allclose(library["mm64"](a, b), a @ b, rtol=1e-12)
    a, b = RNG.standard_normal((37, 19), dtype=np.float32), RNG.standard_normal((45, 19), dtype=np.float32)
    np.testing.assert_allclose(library["mm_bt"](a, b), a @ b.T, rtol=1e-4, atol=1e-4)


def chain_fn(name, shape, dtype):
    t = f"tensor<{'x'.join(map(str, shape))}x{dtype}>"
    if dtype.startswith("f"):
        body = f"""
  %m = arith.mulf %a, %b : {t}
  %s = arith.addf %m, %c : {t}
  %zero = arith.constant dense<0.0> : {t}
  %r = arith.maximumf %s, %zero : {t}"""
    else:
        body = f"""
  %m = arith.muli %a, %b : {t}
  %s = arith.addi %m, %c : {t}
  %zero = arith.constant dense<0> : {t}
  %r = arith.maxsi %s, %zero : {t}"""
    return f"func.func @{name}(%a: {t}, %b: {t}, %c: {t}) -> {t} {{{body}\n  return %r : {t}\n}}\n"


@pytest.mark.parametrize("pipeline", ["default", "loops"])
def test_elementwise_chains_f32_f64_i32(cache_dir, pipeline):
    cases = [("c_f32", (1000, 37), "f32", np.float32), ("c_f64", (4099,), "f64", np.float64),
             ("c_i32", (3, 5, 130), "i32", np.int32)]
    text = "".join(chain_fn(name, shape, d) for name, shape, d, _ in cases)
    options = {"pipeline": LOOPS_PIPELINE} if pipeline == "loops" else {}
    library = compile_library(text, cache_dir=cache_dir, **options)
    for name, shape, _, np_dtype in cases:
        a, b, c = ((RNG.standard_normal(shape) * 10).astype(np_dtype) for _ in range(3))
        np.testing.assert_allclose(library[name](a, b, c), np.maximum(a * b + c, 0), rtol=1e-6, err_msg=name)


def test_default_pipeline_fuses_the_chain_into_one_loop_nest(cache_dir):
    """Fusion is what pays on bandwidth-bound chains: one linalg.generic remains, no temporary buffer."""
    from mlir import ir

    from slicer.dialect import make_context
    from slicer.lowering import DEFAULT_PIPELINE

    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(chain_fn("c", (64, 64), "f32"))
        DEFAULT_PIPELINE.until("bufferize").run(module)
        text = str(module)
    assert text.count("linalg.generic") == 1
    assert "memref.alloc" not in text


def test_reductions_bias_relu_and_several_results(cache_dir):
    text = """
func.func @sums(%x: tensor<50x77xf32>) -> (tensor<50xf32>, tensor<77xf32>) {
  %z = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<50xf32>
  %f0 = linalg.fill ins(%z : f32) outs(%e0 : tensor<50xf32>) -> tensor<50xf32>
  %rows = linalg.reduce ins(%x : tensor<50x77xf32>) outs(%f0 : tensor<50xf32>) dimensions = [1]
    (%in: f32, %acc: f32) { %s = arith.addf %in, %acc : f32
      linalg.yield %s : f32 }
  %e1 = tensor.empty() : tensor<77xf32>
  %f1 = linalg.fill ins(%z : f32) outs(%e1 : tensor<77xf32>) -> tensor<77xf32>
  %cols = linalg.reduce ins(%x : tensor<50x77xf32>) outs(%f1 : tensor<77xf32>) dimensions = [0]
    (%in: f32, %acc: f32) { %s = arith.addf %in, %acc : f32
      linalg.yield %s : f32 }
  return %rows, %cols : tensor<50xf32>, tensor<77xf32>
}
func.func @mlp(%x: tensor<24x40xf32>, %w: tensor<40x72xf32>, %bias: tensor<72xf32>) -> tensor<24x72xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<24x72xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<24x72xf32>) -> tensor<24x72xf32>
  %p = linalg.matmul ins(%x, %w : tensor<24x40xf32>, tensor<40x72xf32>) outs(%f : tensor<24x72xf32>) ->
      tensor<24x72xf32>
  %bb = linalg.broadcast ins(%bias : tensor<72xf32>) outs(%e : tensor<24x72xf32>) dimensions = [0]
  %s = arith.addf %p, %bb : tensor<24x72xf32>
  %zeros = arith.constant dense<0.0> : tensor<24x72xf32>
  %r = arith.maximumf %s, %zeros : tensor<24x72xf32>
  return %r : tensor<24x72xf32>
}
"""
    library = compile_library(text, cache_dir=cache_dir)
    x = RNG.standard_normal((50, 77), dtype=np.float32)
    rows, cols = library["sums"](x)
    np.testing.assert_allclose(rows, x.sum(axis=1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(cols, x.sum(axis=0), rtol=1e-4, atol=1e-4)
    x, w, bias = (
        RNG.standard_normal((24, 40), dtype=np.float32),
        RNG.standard_normal((40, 72), dtype=np.float32),
        RNG.standard_normal(72, dtype=np.float32),
    )
    np.testing.assert_allclose(library["mlp"](x, w, bias), np.maximum(x @ w + bias, 0), rtol=1e-4, atol=1e-4)


SLICER_LOOP = """
"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 2>} : () -> ()
func.func @scaled(%a: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    %b = "slicer.slice"(%a, %r) {dim = 0 : i64} : (tensor<8x4xf32>, !slicer.range<"x", 2>) -> tensor<4x4xf32>
    %c = arith.addf %b, %b : tensor<4x4xf32>
    tosa.yield %c : tensor<4x4xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}
"""


def test_slicer_loop_programs_compile_too(cache_dir):
    """Modules with slicer.mesh / slicer.loop (lowered by the pipeline's first stage) are kernels too."""
    a = RNG.standard_normal((8, 4), dtype=np.float32)
    kernel = compile_kernel(SLICER_LOOP, cache_dir=cache_dir)
    np.testing.assert_array_equal(kernel(a), a + a)


def test_a_failing_transform_script_falls_back_to_loops(tmp_path, monkeypatch, caplog):
    """If the interpreter fails midway, the module is restored and compiled as loops: slower, still right."""
    from slicer.lowering import vectorize

    broken = vectorize._TAIL.replace(
        "    transform.yield\n",
        "    %oops, %oops_loop = transform.structured.tile_using_for %vf tile_sizes [1] : (!transform.any_op) -> "
        "(!transform.any_op, !transform.any_op)\n"
        "    transform.yield\n",
    )
    assert broken != vectorize._TAIL
    monkeypatch.setattr(vectorize, "_TAIL", broken)
    text = matmul_fn("mm", 20, 9, 40) + chain_fn("chain", (300,), "f32")
    with caplog.at_level("WARNING", logger="slicer.kernels"):
        library = compile_library(text, cache_dir=tmp_path)
    assert "vectorization failed" in caplog.text
    a, b = RNG.standard_normal((20, 9), dtype=np.float32), RNG.standard_normal((9, 40), dtype=np.float32)
    np.testing.assert_allclose(library["mm"](a, b), a @ b, rtol=1e-4, atol=1e-4)
    x, y, z = (RNG.standard_normal(300, dtype=np.float32) for _ in range(3))
    np.testing.assert_allclose(library["chain"](x, y, z), np.maximum(x * y + z, 0), rtol=1e-6)


def test_matmul_is_a_packed_gemm_around_an_fma_micro_kernel():
    """The default pipeline turns a matmul into a call to a generated packed GEMM whose micro-kernel is
    vector.fma on AVX-512 vectors (the loops pipeline does not); no linalg op is left."""
    from mlir import ir

    from slicer.dialect import make_context
    from slicer.lowering import DEFAULT_PIPELINE

    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(matmul_fn("mm", 64, 48, 96))
        DEFAULT_PIPELINE.until("vectorize").run(module)
        text = str(module)
    assert "call @__slicer_contract_0" in text
    assert "vector.fma" in text and "vector<16xf32>" in text
    assert "linalg.generic" not in text and "linalg.matmul" not in text


def test_booleans_inside_a_fused_chain_work(cache_dir):
    text = """
func.func @min(%a: tensor<300xf32>, %b: tensor<300xf32>) -> tensor<300xf32> {
  %c = arith.cmpf olt, %a, %b : tensor<300xf32>
  %d = arith.select %c, %a, %b : tensor<300xi1>, tensor<300xf32>
  return %d : tensor<300xf32>
}
"""
    a, b = RNG.standard_normal(300, dtype=np.float32), RNG.standard_normal(300, dtype=np.float32)
    np.testing.assert_array_equal(compile_kernel(text, cache_dir=cache_dir)(a, b), np.minimum(a, b))


def test_boolean_tensors_cross_kernels_as_bytes(cache_dir):
    """Masks are i1 tensors that are returned, taken as arguments, stored between ops, reduced and built from
    constants: kernels store them as bytes (lowering/widen_i1.py), numpy booleans in and out."""
    text = """
func.func @lt(%a: tensor<7xf32>, %b: tensor<7xf32>) -> tensor<7xi1> {
  %c = arith.cmpf olt, %a, %b : tensor<7xf32>
  return %c : tensor<7xi1>
}
func.func @mask(%a: tensor<3x4xf32>, %b: tensor<3x4xf32>) -> tensor<3x4xf32> {
  %c = arith.cmpf olt, %a, %b : tensor<3x4xf32>
  %e = tensor.empty() : tensor<4x3xi1>
  %t = linalg.transpose ins(%c : tensor<3x4xi1>) outs(%e : tensor<4x3xi1>) permutation = [1, 0]
  %e2 = tensor.empty() : tensor<3x4xi1>
  %t2 = linalg.transpose ins(%t : tensor<4x3xi1>) outs(%e2 : tensor<3x4xi1>) permutation = [1, 0]
  %d = arith.select %t2, %a, %b : tensor<3x4xi1>, tensor<3x4xf32>
  return %d : tensor<3x4xf32>
}
func.func @masked(%m: tensor<3x4xi1>, %a: tensor<3x4xf32>) -> (tensor<3x4xf32>, tensor<3xi1>) {
  %inf = arith.constant dense<0xFF800000> : tensor<3x4xf32>
  %d = arith.select %m, %inf, %a : tensor<3x4xi1>, tensor<3x4xf32>
  %true = arith.constant true
  %e = tensor.empty() : tensor<3xi1>
  %all = linalg.fill ins(%true : i1) outs(%e : tensor<3xi1>) -> tensor<3xi1>
  %r = linalg.reduce ins(%m : tensor<3x4xi1>) outs(%all : tensor<3xi1>) dimensions = [1]
    (%x: i1, %acc: i1) { %y = arith.andi %x, %acc : i1
                         linalg.yield %y : i1 }
  return %d, %r : tensor<3x4xf32>, tensor<3xi1>
}
func.func @pattern(%a: tensor<4xf32>) -> tensor<4xf32> {
  %p = arith.constant dense<[true, false, false, true]> : tensor<4xi1>
  %z = arith.constant dense<0.0> : tensor<4xf32>
  %d = arith.select %p, %a, %z : tensor<4xi1>, tensor<4xf32>
  return %d : tensor<4xf32>
}
"""
    library = compile_library(text, cache_dir=cache_dir)
    a, b = RNG.standard_normal(7, dtype=np.float32), RNG.standard_normal(7, dtype=np.float32)
    got = library["lt"](a, b)
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, a < b)
    a, b = RNG.standard_normal((3, 4), dtype=np.float32), RNG.standard_normal((3, 4), dtype=np.float32)
    np.testing.assert_array_equal(library["mask"](a, b), np.minimum(a, b))
    m = np.array([[True, False, True, True], [True] * 4, [False] * 4])
    masked, rows = library["masked"](m, a)
    np.testing.assert_array_equal(masked, np.where(m, -np.inf, a))
    np.testing.assert_array_equal(rows, m.all(axis=1))
    x = RNG.standard_normal(4, dtype=np.float32)
    np.testing.assert_array_equal(library["pattern"](x), np.where([True, False, False, True], x, 0))


def test_narrow_buffers_left_are_a_clear_error_not_a_crash():
    """MLIR 22 asserts (aborting the process) when lowering i1 memref stores: any i1 buffer left after
    bufferization (none is, since boolean tensors become bytes) is refused first."""
    from mlir import ir

    from slicer.dialect import make_context
    from slicer.lowering import KernelError
    from slicer.lowering.widen_i1 import reject_narrow_memrefs

    with make_context(), ir.Location.unknown():
        module = ir.Module.parse("func.func @f(%m: memref<8xi1>) { return }")
        with pytest.raises(KernelError, match=r"buffers of i1 elements \(memref<8xi1>"):
            reject_narrow_memrefs(module)


# A kernel of an uneven partition (fuzzer seed 2026, case 638): its first result is an undefined slice of a
# tensor.empty, its second an add computed into that slice; bufferized, both were one memref.alloc returned twice,
# and buffer-results-to-out-params crashed the process (a segfault). Each result now gets its own buffer.
UNDEFINED_SLICE_AND_ITS_UPDATE = """
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @kernel(%a: tensor<1x3xi32>, %b: tensor<1x3xi32>, %c: tensor<2x3xi32>, %d: tensor<2x3xi32>, %rows:
    tensor<2xi64>)
    -> (tensor<1x3xi32>, tensor<1x3xi32>, tensor<3x3xi32>) {
  %zero = arith.constant 0 : i32
  %c1 = arith.constant 1 : index
  %i = tensor.extract %rows[%c1] : tensor<2xi64>
  %r = arith.index_cast %i : i64 to index
  %whole = tensor.empty() : tensor<3x3xi32>
  %slot = tensor.extract_slice %whole[%r, 0] [1, 3] [1, 1] : tensor<3x3xi32> to tensor<1x3xi32>
  %e = tensor.empty() : tensor<1x3xi32>
  %neg = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]}
      ins(%a : tensor<1x3xi32>) outs(%e : tensor<1x3xi32>) {
  ^bb0(%in: i32, %out: i32):
    %n = arith.subi %zero, %in : i32
    linalg.yield %n : i32
  } -> tensor<1x3xi32>
  %s1 = linalg.add ins(%b, %neg : tensor<1x3xi32>, tensor<1x3xi32>) outs(%slot : tensor<1x3xi32>) -> tensor<1x3xi32>
  %zeros = linalg.fill ins(%zero : i32) outs(%whole : tensor<3x3xi32>) -> tensor<3x3xi32>
  %padded = tensor.insert_slice %c into %zeros[0, 0] [2, 3] [1, 1] : tensor<2x3xi32> into tensor<3x3xi32>
  %row = tensor.extract_slice %padded[%r, 0] [1, 3] [1, 1] : tensor<3x3xi32> to tensor<1x3xi32>
  %s2 = linalg.add ins(%s1, %row : tensor<1x3xi32>, tensor<1x3xi32>) outs(%slot : tensor<1x3xi32>) -> tensor<1x3xi32>
  %e2 = tensor.empty() : tensor<3x3xi32>
  %zeros2 = linalg.fill ins(%zero : i32) outs(%e2 : tensor<3x3xi32>) -> tensor<3x3xi32>
  %padded2 = tensor.insert_slice %d into %zeros2[0, 0] [2, 3] [1, 1] : tensor<2x3xi32> into tensor<3x3xi32>
  return %slot, %s2, %padded2 : tensor<1x3xi32>, tensor<1x3xi32>, tensor<3x3xi32>
}
"""


@pytest.mark.slow
def test_an_undefined_slice_returned_beside_its_update_gets_its_own_buffer(tmp_path):
    source = tmp_path / "kernel.mlir"
    source.write_text(UNDEFINED_SLICE_AND_ITS_UPDATE)
    script = ("import sys; from slicer.lowering import compile_kernel; "
              "compile_kernel(open(sys.argv[1]).read(), cache_dir=sys.argv[2])")
    built = subprocess.run([sys.executable, "-c", script, str(source), str(tmp_path / "cache")],
                           capture_output=True, text=True, timeout=300)  # a crash must not take pytest with it
    assert built.returncode == 0, built.stderr[-2000:]
    kernel = compile_kernel(UNDEFINED_SLICE_AND_ITS_UPDATE, cache_dir=tmp_path / "cache")
    a, b = np.array([[1, 2, 3]], np.int32), np.array([[10, 20, 30]], np.int32)
    c, d = np.arange(6, dtype=np.int32).reshape(2, 3), np.arange(6, 12, dtype=np.int32).reshape(2, 3)
    _, total, padded = kernel(a, b, c, d, np.array([0, 1], dtype=np.int64))
    np.testing.assert_array_equal(total, b - a + c[1:2])
    np.testing.assert_array_equal(padded, np.concatenate([d, np.zeros((1, 3), np.int32)]))


# Transposes are tiled in square blocks (vectorize.py's `_transposed_loop`) and lowered by 16x16 shuffles:
# multiples of the block, remainders in either dim, a block smaller than the tile, 3-D and 4-D permutations
# (attention's heads), a transpose fused with an elementwise op, and element types of other widths.
TRANSPOSES = [
    ((64, 32), (1, 0), "f32"), ((100, 37), (1, 0), "f32"), ((5, 3), (1, 0), "f32"), ((17, 16), (1, 0), "f64"),
    ((48, 33), (1, 0), "i32"), ((4, 24, 40), (0, 2, 1), "f32"), ((3, 40, 5, 18), (0, 2, 1, 3), "f32"),
    ((2, 18, 4, 20), (0, 3, 1, 2), "f32"),
]


def transpose_fn(name, shape, perm, dtype):
    src = "x".join(map(str, shape)) + f"x{dtype}"
    dst = "x".join(str(shape[p]) for p in perm) + f"x{dtype}"
    return f"""
func.func @{name}(%a: tensor<{src}>) -> tensor<{dst}> {{
  %e = tensor.empty() : tensor<{dst}>
  %t = linalg.transpose ins(%a : tensor<{src}>) outs(%e : tensor<{dst}>) permutation = [{", ".join(map(str, perm))}]
  return %t : tensor<{dst}>
}}
"""


def test_transposes_of_many_shapes_equal_numpy(cache_dir):
    names = [f"t{i}" for i in range(len(TRANSPOSES))]
    library = compile_library("\n".join(transpose_fn(n, *case) for n, case in zip(names, TRANSPOSES)),
                              cache_dir=cache_dir)
    numpy_type = {"f32": np.float32, "f64": np.float64, "i32": np.int32}
    for name, (shape, perm, dtype) in zip(names, TRANSPOSES):
        a = (RNG.standard_normal(shape) * 100).astype(numpy_type[dtype])
        np.testing.assert_array_equal(library[name](a), np.transpose(a, perm), err_msg=f"{shape} {perm} {dtype}")


def test_a_transpose_fused_with_an_add_equals_numpy(cache_dir):
    text = """
#in = affine_map<(i, j) -> (j, i)>
#out = affine_map<(i, j) -> (i, j)>
func.func @tadd(%a: tensor<70x45xf32>, %b: tensor<45x70xf32>) -> tensor<45x70xf32> {
  %e = tensor.empty() : tensor<45x70xf32>
  %r = linalg.generic {indexing_maps = [#in, #out, #out], iterator_types = ["parallel", "parallel"]}
      ins(%a, %b : tensor<70x45xf32>, tensor<45x70xf32>) outs(%e : tensor<45x70xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<45x70xf32>
  return %r : tensor<45x70xf32>
}
"""
    a = RNG.standard_normal((70, 45), dtype=np.float32)
    b = RNG.standard_normal((45, 70), dtype=np.float32)
    np.testing.assert_allclose(compile_library(text, cache_dir=cache_dir)["tadd"](a, b), a.T + b, rtol=1e-6)


@pytest.mark.slow
def test_a_reduction_to_one_element_of_a_broadcast_product_equals_numpy(cache_dir, tmp_path):
    """sum(a * b^T broadcast over a's first dim) to a scalar: vectorized, MLIR's contraction lowering aborted the
    process (fuzz seed 4848, case 11); it stays a scalar loop nest and equals numpy."""
    text = """
#a = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#b = affine_map<(d0, d1, d2) -> (d2, d1)>
#r = affine_map<(d0, d1, d2) -> ()>
func.func @dot(%a: tensor<4x32x32xf32>, %b: tensor<32x32xf32>) -> tensor<f32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<f32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<f32>) -> tensor<f32>
  %r = linalg.generic {indexing_maps = [#a, #b, #r], iterator_types = ["reduction", "reduction", "reduction"]}
      ins(%a, %b : tensor<4x32x32xf32>, tensor<32x32xf32>) outs(%f : tensor<f32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %m = arith.mulf %x, %y : f32
    %s = arith.addf %m, %o : f32
    linalg.yield %s : f32
  } -> tensor<f32>
  return %r : tensor<f32>
}
"""
    a = RNG.standard_normal((4, 32, 32), dtype=np.float32)
    b = RNG.standard_normal((32, 32), dtype=np.float32)
    # in a subprocess: an abort would end the test run, not fail a test
    code = (f"import numpy as np; from slicer.lowering import compile_library; "
            f"lib = compile_library({text!r}, cache_dir={str(cache_dir)!r}); "
            f"a = np.load({str(tmp_path / 'a.npy')!r}); b = np.load({str(tmp_path / 'b.npy')!r}); "
            f"print(float(lib['dot'](a, b)))")
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    expected = float((a.astype(np.float64) * b.T[None].astype(np.float64)).sum())
    assert float(done.stdout.strip().splitlines()[-1]) == pytest.approx(expected, rel=1e-4, abs=1e-3)


PADDED_K = """
func.func @padded_k(%a: tensor<37x45xf32>, %b: tensor<45x50xf32>, %n: tensor<1xi64>) -> tensor<37x50xf32> {
  %c0 = arith.constant 0 : index
  %v = tensor.extract %n[%c0] : tensor<1xi64>
  %valid = arith.index_cast %v : i64 to index
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<37x50xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<37x50xf32>) -> tensor<37x50xf32>
  %p = linalg.generic {indexing_maps = [affine_map<(i, j, k) -> (i, k)>, affine_map<(i, j, k) -> (k, j)>,
      affine_map<(i, j, k) -> (i, j)>], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%a, %b : tensor<37x45xf32>, tensor<45x50xf32>) outs(%f : tensor<37x50xf32>) {
  ^bb0(%x: f32, %y: f32, %acc: f32):
    %k = linalg.index 2 : index
    %inside = arith.cmpi ult, %k, %valid : index
    %xm = arith.select %inside, %x, %z : f32
    %ym = arith.select %inside, %y, %z : f32
    %m = arith.mulf %xm, %ym : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<37x50xf32>
  return %p : tensor<37x50xf32>
}
"""


@pytest.mark.parametrize("valid", [45, 40, 0])
def test_contraction_masked_by_its_padded_dim_equals_numpy(cache_dir, valid):
    """A contraction over a padded dim, its operands masked by the loop index (the padding's zeroing fused into
    it: a vocabulary-parallel LM head's backward), runs as the packed GEMM (lit: slicer-kernel-contract-padded)
    and sums the valid rows only: the padding's NaN and infinities stay out."""
    library = compile_library(PADDED_K, cache_dir=cache_dir)
    a = RNG.standard_normal((37, 45), dtype=np.float32)
    b = RNG.standard_normal((45, 50), dtype=np.float32)
    a[:, valid:], b[valid:] = np.nan, np.inf
    result = library["padded_k"](a, b, np.array([valid], dtype=np.int64))
    np.testing.assert_allclose(result, a[:, :valid] @ b[:valid], rtol=1e-4, atol=1e-4)
