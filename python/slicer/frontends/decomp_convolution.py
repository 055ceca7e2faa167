"""The gradients of a 2-d convolution as plain convolutions, for the tracing decomposition table.

torch-mlir decomposes `aten.convolution_backward` itself, into forms that waste work once the convolution is
strided: the input gradient is a convolution over the output gradient dilated with zeros (3/4 of its products
are by zero at stride 2; a strided 1x1 convolution's even reads the weight by index, which no GEMM takes) and
the weight gradient a grouped convolution with the batch as groups, whose [C, N, F, kh, kw] result is summed over
the batch afterwards. Here both are stride-1 convolutions without zeros, which the kernels compile as GEMMs
(`lowering/contract/im2col.py`):

- weight gradient: `dw[f, c] = sum_n conv(x[n, c], dy[n, f])`: one convolution of the batch-transposed input
  [C, N, H, W] with the batch-transposed output gradient [F, N, OH, OW] as its kernel, dilated by the stride,
  padded as the forward reads it (exactly kh x kw outputs; torch's own formula, in cuDNN's form).
- input gradient: the stride-s transposed convolution split into its s x s phases (sub-pixel convolution):
  padded input row `i = q * s + r` receives `sum_j dy[q - j] * w[r + s * j]`, a stride-1 full correlation of
  dy with the flipped sub-kernel `w[..., r::s, t::s]` (none when the kernel is narrower than the stride: those
  rows are zero); the phases are written into the padded input by strided inserts (`slice_scatter`; a stack
  and transpose of bf16 phases made vector shuffles LLVM cannot select) and its padding cropped. A 1x1 phase is a
  batched matmul, and kernels are flipped by moving whole taps (`_correlate`).

Dilated, grouped, transposed and non-2-d convolutions keep torch-mlir's decomposition (`NotImplemented`).
"""

from __future__ import annotations


def convolution_decompositions(torch) -> dict:
    """{aten.convolution_backward: its plain-convolution form} (see the module docstring)."""
    return {torch.ops.aten.convolution_backward.default: _convolution_backward}


def _convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
                          output_padding, groups, output_mask):
    if (transposed or groups != 1 or input.dim() != 4 or any(d != 1 for d in dilation)
            or any(p != 0 for p in output_padding)):
        return NotImplemented
    grad_input = _input_gradient(grad_output, input, weight, stride, padding) if output_mask[0] else None
    grad_weight = _weight_gradient(grad_output, input, weight, stride, padding) if output_mask[1] else None
    grad_bias = grad_output.sum((0, 2, 3)) if output_mask[2] else None
    return grad_input, grad_weight, grad_bias


def _weight_gradient(grad_output, input, weight, stride, padding):
    import torch  # optional dependency; only called while torch traces

    k, out, size = weight.shape[2:], grad_output.shape[2:], input.shape[2:]
    # The padded input's extent the forward reads: k + (out - 1) * s. Past it (a stride that does not divide the
    # padded extent) the rows are cropped, or the high padding cut, so the result is exactly [C, F, kh, kw]:
    # the symmetric padding made it [C, F, kh + 1, ...] at stride 2, products computed and thrown away.
    high = [k[i] + (out[i] - 1) * stride[i] - size[i] - padding[i] for i in range(2)]
    x = input.transpose(0, 1)[:, :, :size[0] + min(high[0], 0), :size[1] + min(high[1], 0)]
    if any(padding) or any(h > 0 for h in high):
        x = torch.nn.functional.pad(x, (padding[1], max(high[1], 0), padding[0], max(high[0], 0)))
    grad = torch.ops.aten.convolution(x, grad_output.transpose(0, 1), None, [1, 1], [0, 0], list(stride), False,
                                      [0, 0], 1)  # [C, F, kh, kw]
    return grad.transpose(0, 1)


def _input_gradient(grad_output, input, weight, stride, padding):
    import torch  # optional dependency; only called while torch traces

    aten = torch.ops.aten
    n, c, h, w = input.shape
    k = weight.shape[2:]
    sh, sw = stride
    if sh == 1 and sw == 1 and all(p <= kk - 1 for p, kk in zip(padding, k)):  # the plain transposed form
        return _correlate(aten, grad_output, weight, [k[0] - 1 - padding[0], k[1] - 1 - padding[1]])
    padded = (h + 2 * padding[0], w + 2 * padding[1])
    rows = -(-padded[0] // sh), -(-padded[1] // sw)  # phase extents: padded rows q * s + r, q < rows
    interleaved = grad_output.new_zeros((n, c, rows[0] * sh, rows[1] * sw))
    for r in range(sh):
        line = grad_output.new_zeros((n, c, rows[0], rows[1] * sw))
        for t in range(sw):
            phase = _phase(aten, grad_output, weight, (r, t), (sh, sw), rows, (n, c))
            line = aten.slice_scatter(line, phase, 3, t, None, sw)
        interleaved = aten.slice_scatter(interleaved, line, 2, r, None, sh)
    return interleaved[:, :, padding[0]:padding[0] + h, padding[1]:padding[1] + w]


def _phase(aten, grad_output, weight, phase, stride, rows, nc):
    """The padded input gradient's rows q * s + r and columns q' * s' + t: [N, C, rows_h, rows_w]."""
    import torch  # optional dependency; only called while torch traces

    r, t = phase
    sub = weight[:, :, r::stride[0], t::stride[1]]  # [F, C, Jr, Jt]
    if sub.shape[2] == 0 or sub.shape[3] == 0:  # the kernel never lands on these rows or columns
        return grad_output.new_zeros((*nc, *rows))
    jr, jt = sub.shape[2:]
    full = _correlate(aten, grad_output, sub, [jr - 1, jt - 1])  # [N, C, OH + Jr - 1, OW + Jt - 1]
    full = full[:, :, :rows[0], :rows[1]]
    missing = (rows[0] - full.shape[2], rows[1] - full.shape[3])
    if missing[0] or missing[1]:
        full = torch.nn.functional.pad(full, (0, missing[1], 0, missing[0]))
    return full


def _correlate(aten, grad_output, weight, padding):
    """sum_f dy[n, f] (*) w[f, c] flipped, padded by `padding`: [N, C, ...]. A 1x1 kernel is a batched matmul
    (torch-mlir lowers a 1x1 convolution to a generic reading the weight by index, which no GEMM takes). The
    flip moves whole taps: the weight transposed to [kh * kw, C, F] (each tap one contiguous block, and the
    conversion's [C, F] order), its taps concatenated in reverse, all plain copies. torch-mlir's `flip` reads by
    computed index element by element, and a product with the anti-identity (K = N = kh * kw, a GEMM shape the
    micro-kernels waste) was a large share of ResNet-18's step (benchmarks/README.md)."""
    import torch  # optional dependency; only called while torch traces

    f, c, kh, kw = weight.shape
    if kh == 1 and kw == 1 and padding == [0, 0]:
        n, _, h, w = grad_output.shape
        product = torch.matmul(weight.reshape(f, c).t(), grad_output.reshape(n, f, h * w))  # [N, C, H * W]
        return product.reshape(n, c, h, w)
    taps = weight.reshape(f, c, kh * kw).permute(2, 1, 0)  # [kh * kw, C, F]: one tap a contiguous block
    flipped = torch.cat([taps[i:i + 1] for i in reversed(range(kh * kw))])
    flipped = flipped.reshape(kh, kw, c, f).permute(2, 3, 0, 1)
    return aten.convolution(grad_output, flipped, None, [1, 1], padding, [1, 1], False, [0, 0], 1)


__all__ = ["convolution_decompositions"]
