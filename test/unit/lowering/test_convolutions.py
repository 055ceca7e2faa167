"""Convolutions compiled through the im2col rewrite and the packed GEMM (`lowering/contract/im2col.py`) equal
torch's: the forward convolution, its input gradient and its weight gradient, in the `linalg.generic` forms
torch-mlir gives them (input read through `oh * s + kh`), with strides 1 and 2, padding 0, 1 and 3 (a
`tensor.pad` before the op), kernels 1, 3 and 7, odd sizes, feature maps narrower than a register tile, and a
patch large enough to be built in chunks."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from mlir import ir  # noqa: E402
from mlir.dialects import linalg  # noqa: E402

from slicer.core.operations import walk_ops  # noqa: E402
from slicer.dialect import make_context  # noqa: E402
from slicer.lowering import DEFAULT_PIPELINE, compile_library  # noqa: E402
from slicer.lowering.contract import NotAContraction, analyze, im2col  # noqa: E402

RNG = np.random.default_rng(3)
DIMS7 = "(d0, d1, d2, d3, d4, d5, d6)"


def _t(shape, dtype):
    return f"tensor<{'x'.join(map(str, shape))}x{dtype}>"


def conv_fn(name, x_shape, w_shape, stride, pad, dtype="f32"):
    """y[n, f, oh, ow] = sum_{c, kh, kw} pad(x)[n, c, oh * s + kh, ow * s + kw] * w[f, c, kh, kw] (torch-mlir's
    form)."""
    n, c, h, w = x_shape
    f, _, k, _ = w_shape
    hp, wp = h + 2 * pad, w + 2 * pad
    oh, ow = (hp - k) // stride + 1, (wp - k) // stride + 1
    s = "" if stride == 1 else f" * {stride}"
    x_map = f"affine_map<{DIMS7} -> (d0, d4, d2{s} + d5, d3{s} + d6)>"
    return _generic(name, [(x_shape, (n, c, hp, wp), pad), (w_shape, None, 0)], (n, f, oh, ow),
                    [x_map, f"affine_map<{DIMS7} -> (d1, d4, d5, d6)>", f"affine_map<{DIMS7} -> (d0, d1, d2, d3)>"],
                    dtype)


def weight_grad_fn(name, x_shape, g_shape, k, stride, pad, dtype="f32"):
    """dw[f, c, kh, kw] = sum_{n, oh, ow} pad(x)[n, c, oh * s + kh, ow * s + kw] * g[n, f, oh, ow]."""
    n, c, h, w = x_shape
    _, f, _, _ = g_shape
    s = "" if stride == 1 else f" * {stride}"
    x_map = f"affine_map<{DIMS7} -> (d4, d1, d5{s} + d2, d6{s} + d3)>"
    return _generic(name, [(x_shape, (n, c, h + 2 * pad, w + 2 * pad), pad), (g_shape, None, 0)], (f, c, k, k),
                    [x_map, f"affine_map<{DIMS7} -> (d4, d0, d5, d6)>", f"affine_map<{DIMS7} -> (d0, d1, d2, d3)>"],
                    dtype)


def _generic(name, inputs, out_shape, maps, dtype):
    lines, operands, types = [f"  %z = arith.constant 0.0 : {dtype}"], [], []
    for i, (shape, padded, pad) in enumerate(inputs):
        value = f"%a{i}"
        if pad:
            lines.append(f"  %p{i} = tensor.pad %a{i} low[0, 0, {pad}, {pad}] high[0, 0, {pad}, {pad}] {{\n"
                         f"  ^bb0(%i0: index, %i1: index, %i2: index, %i3: index):\n    tensor.yield %z : {dtype}\n"
                         f"  }} : {_t(shape, dtype)} to {_t(padded, dtype)}")
            value, shape = f"%p{i}", padded
        operands.append(value)
        types.append(_t(shape, dtype))
    out = _t(out_shape, dtype)
    args = ", ".join(f"%a{i}: {_t(s, dtype)}" for i, (s, _, _) in enumerate(inputs))
    kinds = ", ".join(['"parallel"'] * 4 + ['"reduction"'] * 3)
    return f"""
func.func @{name}({args}) -> {out} {{
{chr(10).join(lines)}
  %e = tensor.empty() : {out}
  %f = linalg.fill ins(%z : {dtype}) outs(%e : {out}) -> {out}
  %r = linalg.generic {{indexing_maps = [{', '.join(maps)}], iterator_types = [{kinds}]}}
      ins({', '.join(operands)} : {', '.join(types)}) outs(%f : {out}) {{
  ^bb0(%x: {dtype}, %y: {dtype}, %acc: {dtype}):
    %m = arith.mulf %x, %y : {dtype}
    %s = arith.addf %acc, %m : {dtype}
    linalg.yield %s : {dtype}
  }} -> {out}
  return %r : {out}
}}
"""


# (x shape [N, C, H, W], output channels F, kernel, stride, padding)
CASES = [
    ((2, 3, 9, 9), 8, 3, 1, 1),  # an RGB stem, odd size
    ((2, 16, 16, 16), 16, 3, 1, 1),  # a BasicBlock's 3x3
    ((2, 16, 16, 16), 32, 3, 2, 1),  # the strided 3x3 of a downsampling block
    ((2, 16, 16, 16), 32, 1, 2, 0),  # its 1x1 downsample (a strided projection)
    ((3, 32, 4, 4), 64, 3, 1, 1),  # a 4x4 map: narrower than a register tile
    ((2, 64, 2, 2), 64, 3, 1, 1),  # 2x2
    ((1, 3, 21, 19), 16, 7, 2, 3),  # ResNet's 7x7 stem, odd sizes
    ((2, 5, 7, 11), 7, 1, 1, 0),  # 1x1, odd channels
    ((4, 32, 24, 24), 32, 3, 1, 1),  # a patch over PATCH_BYTES: built and consumed in chunks of the batch
]


def _ids(case):
    x, f, k, s, p = case
    return f"x{'x'.join(map(str, x))}_f{f}_k{k}_s{s}_p{p}"


def _contractions_after_rewrite(text: str) -> list[str]:
    """The classification of each contraction the pipeline's GEMM step finds after the im2col rewrite."""
    with make_context():
        module = ir.Module.parse(text)
        DEFAULT_PIPELINE.until("bufferize").run(module)
        for op in walk_ops(module.operation, linalg.GenericOp.OPERATION_NAME):
            im2col.rewrite(op)
        found = []
        for op in walk_ops(module.operation, linalg.GenericOp.OPERATION_NAME):
            try:
                found.append(analyze(op).describe())
            except NotAContraction:
                pass
        return found


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_forward_and_weight_gradient_equal_torch(cache_dir, case):
    x_shape, f, k, stride, pad = case
    x = RNG.standard_normal(x_shape).astype(np.float32)
    w = RNG.standard_normal((f, x_shape[1], k, k)).astype(np.float32)
    xt, wt = torch.from_numpy(x).double().requires_grad_(), torch.from_numpy(w).double().requires_grad_()
    y = torch.nn.functional.conv2d(xt, wt, stride=stride, padding=pad)
    g = torch.from_numpy(RNG.standard_normal(tuple(y.shape)).astype(np.float32)).double()
    dx, dw = torch.autograd.grad(y, (xt, wt), g)
    text = conv_fn("forward", x_shape, w.shape, stride, pad) + weight_grad_fn("wgrad", x_shape, tuple(y.shape), k,
                                                                              stride, pad)
    # the input gradient: a stride-1 convolution of the dilated, padded g with the flipped, transposed weights
    # (torch-mlir's form of it; the dilation is done here, as torch-mlir's insert_slice does it)
    dilated = np.zeros((g.shape[0], f, (g.shape[2] - 1) * stride + 1, (g.shape[3] - 1) * stride + 1), np.float32)
    dilated[:, :, ::stride, ::stride] = g.numpy()
    extra_h = x_shape[2] + 2 * pad - k - (y.shape[2] - 1) * stride  # rows the strided forward never read
    extra_w = x_shape[3] + 2 * pad - k - (y.shape[3] - 1) * stride
    framed = np.pad(dilated, ((0, 0), (0, 0), (k - 1, k - 1 + extra_h), (k - 1, k - 1 + extra_w)))
    flipped = np.ascontiguousarray(w[:, :, ::-1, ::-1].transpose(1, 0, 2, 3))
    text += conv_fn("input_grad", framed.shape, flipped.shape, 1, 0)
    library = compile_library(text, cache_dir=cache_dir)
    tol = dict(rtol=2e-4, atol=2e-4 * np.sqrt(x_shape[1] * k * k))
    np.testing.assert_allclose(library["forward"](x, w), y.detach().numpy(), **tol)
    np.testing.assert_allclose(library["wgrad"](x, g.float().numpy()), dw.numpy(), rtol=2e-4,
                               atol=2e-4 * np.sqrt(g.numel() / f))
    full = library["input_grad"](framed, flipped)
    np.testing.assert_allclose(full[:, :, pad:pad + x_shape[2], pad:pad + x_shape[3]], dx.numpy(), **tol)


def test_every_convolution_form_becomes_a_packed_gemm():
    """The forward, weight gradient and input gradient forms all reach the GEMM generator after the rewrite."""
    text = conv_fn("forward", (2, 16, 8, 8), (32, 16, 3, 3), 2,
                   1) + weight_grad_fn("wgrad", (2, 16, 8, 8), (2, 32, 4, 4), 3, 2, 1)
    found = _contractions_after_rewrite(text)
    assert len(found) == 2, found


def test_a_weight_gradient_with_a_fused_normalization_backward(cache_dir):
    """Elementwise fusion puts the producer of the output gradient (a BatchNorm backward) into the weight
    gradient's generic: several inputs read through projections on one side, the patch on the other."""
    dims = "(f, c, kh, kw, n, oh, ow)"
    text = """
func.func @fused(%x: tensor<2x8x10x10xf32>, %g: tensor<2x16x8x8xf32>, %s: tensor<16xf32>) -> tensor<16x8x3x3xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<16x8x3x3xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<16x8x3x3xf32>) -> tensor<16x8x3x3xf32>
  %r = linalg.generic {indexing_maps = [affine_map<DIMS -> (n, c, oh + kh, ow + kw)>,
      affine_map<DIMS -> (n, f, oh, ow)>,
                                        affine_map<DIMS -> (f)>, affine_map<DIMS -> (f, c, kh, kw)>],
                       iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction",
                           "reduction"]}
      ins(%x, %g, %s : tensor<2x8x10x10xf32>, tensor<2x16x8x8xf32>, tensor<16xf32>) outs(%f : tensor<16x8x3x3xf32>) {
  ^bb0(%a: f32, %b: f32, %scale: f32, %acc: f32):
    %bs = arith.mulf %b, %scale : f32
    %m = arith.mulf %a, %bs : f32
    %sum = arith.addf %acc, %m : f32
    linalg.yield %sum : f32
  } -> tensor<16x8x3x3xf32>
  return %r : tensor<16x8x3x3xf32>
}
""".replace("DIMS", dims)
    assert _contractions_after_rewrite(text), "the fused weight gradient reaches the GEMM generator"
    x = RNG.standard_normal((2, 8, 10, 10)).astype(np.float32)
    g = RNG.standard_normal((2, 16, 8, 8)).astype(np.float32)
    s = RNG.standard_normal(16).astype(np.float32)
    want = np.einsum("nfhw,f,nchwij->fcij", g, s, np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(2, 3)))
    got = compile_library(text, cache_dir=cache_dir)["fused"](x, g, s)
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-3)


def test_a_named_strided_dilated_convolution_equals_torch(cache_dir):
    """`linalg.conv_2d_nchw_fchw` as a user writes it (generalized first: `oh * 2 + kh * 2`)."""
    text = """
func.func @named(%x: tensor<2x8x15x13xf32>, %w: tensor<12x8x3x3xf32>) -> tensor<2x12x6x5xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2x12x6x5xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<2x12x6x5xf32>) -> tensor<2x12x6x5xf32>
  %r = linalg.conv_2d_nchw_fchw {dilations = dense<2> : tensor<2xi64>, strides = dense<2> : tensor<2xi64>}
      ins(%x, %w : tensor<2x8x15x13xf32>, tensor<12x8x3x3xf32>) outs(%f : tensor<2x12x6x5xf32>) -> tensor<2x12x6x5xf32>
  return %r : tensor<2x12x6x5xf32>
}
"""
    x = RNG.standard_normal((2, 8, 15, 13)).astype(np.float32)
    w = RNG.standard_normal((12, 8, 3, 3)).astype(np.float32)
    want = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), stride=2, dilation=2).numpy()
    np.testing.assert_allclose(compile_library(text, cache_dir=cache_dir)["named"](x, w), want, rtol=2e-4, atol=2e-4)


def test_the_element_type_is_a_parameter_f64(cache_dir):
    x = RNG.standard_normal((2, 16, 9, 9))
    w = RNG.standard_normal((24, 16, 3, 3))
    text = conv_fn("f64", x.shape, w.shape, 2, 1, dtype="f64")
    assert _contractions_after_rewrite(text)[0].endswith("f64")
    want = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), stride=2, padding=1).numpy()
    np.testing.assert_allclose(compile_library(text, cache_dir=cache_dir)["f64"](x, w), want, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("case", [CASES[1], CASES[2], CASES[6]], ids=_ids)
def test_bf16_convolutions_accumulate_in_f32_and_round_once(cache_dir, case):
    """A bf16 convolution (mixed precision's, or a `model.to(torch.bfloat16)`): im2col's patch of bf16 and the
    bf16 GEMM (f32 accumulation), each output rounded once. Reference: float64 on the same bf16 inputs; bound:
    the f32 sum's error (1e-5 of sum |x||w|) plus one bf16 rounding (2^-8 of the value)."""
    import ml_dtypes

    bf16 = ml_dtypes.bfloat16
    x_shape, f, k, s, p = case
    x = RNG.standard_normal(x_shape).astype(bf16)
    w = (RNG.standard_normal((f, x_shape[1], k, k)) / k).astype(bf16)
    text = conv_fn("conv", x.shape, w.shape, s, p, dtype="bf16")
    with make_context():
        module = ir.Module.parse(text)
        DEFAULT_PIPELINE.until("vectorize").run(module)
        assert "__slicer_ukernel_bf16_" in str(module)  # the patch and the weights packed as bf16 pairs
    got = compile_library(text, cache_dir=cache_dir)["conv"](x, w)
    assert got.dtype == bf16
    wide = [torch.from_numpy(a.astype(np.float64)) for a in (x, w)]
    exact = torch.nn.functional.conv2d(*wide, stride=s, padding=p).numpy()
    scale = torch.nn.functional.conv2d(wide[0].abs(), wide[1].abs(), stride=s, padding=p).numpy()
    error = np.abs(got.astype(np.float64) - exact)
    assert (error <= 1e-5 * scale + 2.0 ** -8 * np.abs(exact)).all(), float((error - 2.0 ** -8 * np.abs(exact)).max())
