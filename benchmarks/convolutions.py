"""Convolutions: Slicer's kernels next to torch's (oneDNN, 1 thread), and a ResNet-18-style training step.

    python benchmarks/convolutions.py kernels [--json conv.json]    # forward / input grad / weight grad kernels
    python benchmarks/convolutions.py step [--json step.json]       # the training step, 2 ranks vs torch
    python benchmarks/convolutions.py kernels step --batch 16 --image 32 --widths 64,128,256,512

Kernels: the `linalg.generic` forms torch-mlir gives a 2-d convolution and Slicer's decomposition gives its
gradients (`frontends/decomp_convolution.py`): the forward `y = conv(pad(x), w)` with its stride, the weight
gradient `dw = conv(pad(x)^T, dy^T)` dilated by the stride, and the stride-1 input gradient `dx = conv(pad(dy),
flip(w)^T)` (a strided one is s x s such convolutions), at the shapes of ResNet-18's layers; each compiled
through the kernel pipeline (`slicer-kernel-im2col`, then the packed GEMM) and timed against torch's
`conv2d` / `conv2d_input` / `conv2d_weight` on 1 thread, round robin, median of the calling thread's CPU time.

Step: the zoo's ResNet-18 (`examples/zoo/zoo_models.py`: BasicBlocks 2-2-2-2, strided 3x3 convolutions, 1x1
downsamples, train-mode BatchNorm) with SGD, Slicer data parallel on 2 ranks in a session against torch eager
with 2 threads (and 1 thread): the median wall time of a step after warm-up. The machine is shared: quote the
medians as indicative.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("parts", nargs="+", choices=("kernels", "step"))
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON to PATH")
    parser.add_argument("--reps", type=int, default=11, help="timed rounds per kernel case (median reported)")
    parser.add_argument("--steps", type=int, default=10, help="timed training steps (after 3 warm-up steps)")
    parser.add_argument("--batch", type=int, default=16, help="the step's global batch")
    parser.add_argument("--image", type=int, default=32, help="the step's image size")
    parser.add_argument("--widths", default="64,128,256,512", help="the ResNet's stage widths")
    parser.add_argument("--precision", choices=("f32", "bf16"), default="f32",
                        help="the step's bf16: slicer.MixedPrecision(bf16, f32) against torch.autocast to bf16")
    return parser.parse_args()


ARGS = parse_args()
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

DIMS = "(d0, d1, d2, d3, d4, d5, d6)"


def _t(shape) -> str:
    return f"tensor<{'x'.join(map(str, shape))}xf32>"


def conv_text(name: str, x_shape, w_shape, out_shape, x_map: str, w_map: str, pad: int) -> str:
    """out = sum pad(x)[x_map] * w[w_map] over the last three loop dims, as torch-mlir writes a convolution."""
    n, c, h, w = x_shape
    padded = (n, c, h + 2 * pad, w + 2 * pad)
    pad_op = (f"  %p = tensor.pad %x low[0, 0, {pad}, {pad}] high[0, 0, {pad}, {pad}] {{\n"
              f"  ^bb0(%i0: index, %i1: index, %i2: index, %i3: index):\n    tensor.yield %z : f32\n"
              f"  }} : {_t(x_shape)} to {_t(padded)}\n") if pad else ""
    x_value = "%p" if pad else "%x"
    kinds = ", ".join(['"parallel"'] * 4 + ['"reduction"'] * 3)
    return f"""
func.func @{name}(%x: {_t(x_shape)}, %w: {_t(w_shape)}) -> {_t(out_shape)} {{
  %z = arith.constant 0.0 : f32
{pad_op}  %e = tensor.empty() : {_t(out_shape)}
  %f = linalg.fill ins(%z : f32) outs(%e : {_t(out_shape)}) -> {_t(out_shape)}
  %r = linalg.generic {{indexing_maps = [affine_map<{DIMS} -> {x_map}>, affine_map<{DIMS} -> {w_map}>,
                        affine_map<{DIMS} -> (d0, d1, d2, d3)>], iterator_types = [{kinds}]}}
      ins({x_value}, %w : {_t(padded if pad else x_shape)}, {_t(w_shape)}) outs(%f : {_t(out_shape)}) {{
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }} -> {_t(out_shape)}
  return %r : {_t(out_shape)}
}}
"""


def layer_cases(batch: int, image: int, widths: list[int]) -> list[tuple]:
    """(label, N, C, F, H, kernel, stride, padding): ResNet-18's distinct convolutions at this size."""
    cases = [("stem 3x3", batch, 3, widths[0], image, 3, 1, 1)]
    size, inp = image, widths[0]
    for i, w in enumerate(widths):
        stride = 1 if i == 0 else 2
        if stride == 2:
            cases.append((f"stage{i + 1} 3x3/2", batch, inp, w, size, 3, 2, 1))
            cases.append((f"stage{i + 1} 1x1/2", batch, inp, w, size, 1, 2, 0))
            size //= 2
        cases.append((f"stage{i + 1} 3x3", batch, w, w, size, 3, 1, 1))
        inp = w
    return cases


def kernel_programs(case) -> list[tuple]:
    """(kind, MLIR function, our inputs, torch callable, FLOPs) of one layer's forward, input and weight gradient."""
    label, n, c, f, h, k, s, p = case
    o = (h + 2 * p - k) // s + 1
    st = "" if s == 1 else f" * {s}"
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, h, h), dtype=np.float32)
    w = rng.standard_normal((f, c, k, k), dtype=np.float32)
    g = rng.standard_normal((n, f, o, o), dtype=np.float32)
    tx, tw, tg = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(g)
    flops = 2 * n * f * o * o * c * k * k
    key = label.replace(" ", "_").replace("/", "s")
    out = [("forward", conv_text(f"fwd_{key}", x.shape, w.shape, (n, f, o, o), f"(d0, d4, d2{st} + d5, d3{st} + d6)",
                                 "(d1, d4, d5, d6)", p), [x, w],
            lambda: torch.nn.functional.conv2d(tx, tw, stride=s, padding=p), flops)]
    out.append(("weight grad", conv_text(f"wgrad_{key}", (c, n, h, h), (f, n, o, o), (c, f, k, k),
                                         f"(d0, d4, d2 + d5{st}, d3 + d6{st})", "(d1, d4, d5, d6)", p),
                [np.ascontiguousarray(x.transpose(1, 0, 2, 3)), np.ascontiguousarray(g.transpose(1, 0, 2, 3))],
                lambda: torch.nn.grad.conv2d_weight(tx, tw.shape, tg, stride=s, padding=p).transpose(0, 1), flops))
    if s == 1 and c > 3:  # (the stem's input gradient, the images', is never computed in training)
        flipped = np.ascontiguousarray(w[:, :, ::-1, ::-1].transpose(1, 0, 2, 3))
        out.append(("input grad", conv_text(f"igrad_{key}", g.shape, flipped.shape, (n, c, h, h),
                                            "(d0, d4, d2 + d5, d3 + d6)", "(d1, d4, d5, d6)", k - 1 - p), [g, flipped],
                    lambda: torch.nn.grad.conv2d_input(tx.shape, tw, tg, stride=s, padding=p), flops))
    return out


def timed(contenders: dict, reps: int) -> dict[str, float]:
    for fn in contenders.values():
        fn()
    times = {name: [] for name in contenders}
    for _ in range(reps):
        for name, fn in contenders.items():
            start = time.thread_time()
            fn()
            times[name].append(time.thread_time() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def run_kernels(results: dict, widths: list[int]) -> None:
    from slicer.lowering import compile_library

    torch.set_num_threads(1)
    cases = [(case, kernel) for case in layer_cases(ARGS.batch, ARGS.image, widths) for kernel in kernel_programs(case)]
    library = compile_library("".join(text for _, (_, text, _, _, _) in cases))
    rows = []
    for (case, (kind, _, arrays, reference, flops)), kernel in zip(cases, library):
        got, want = kernel(*arrays), reference().numpy()
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * np.sqrt(flops / got.size),
                                   err_msg=f"{case[0]} {kind}")
        t = timed({"slicer": lambda kernel=kernel, arrays=arrays: kernel(*arrays), "torch": reference}, ARGS.reps)
        row = {"layer": case[0], "kind": kind, "shape": dict(zip("NCFHks", case[1:])) | {"p": case[7]},
               "slicer_ms": t["slicer"] * 1e3, "torch_ms": t["torch"] * 1e3, "slicer_gflops": flops / t["slicer"] / 1e9,
               "torch_gflops": flops / t["torch"] / 1e9, "vs_torch": t["torch"] / t["slicer"]}
        rows.append(row)
        print(f"{case[0]:16s} {kind:12s} slicer {row['slicer_ms']:8.3f} ms {row['slicer_gflops']:5.0f} GF/s   "
              f"torch {row['torch_ms']:8.3f} ms {row['torch_gflops']:5.0f} GF/s   {row['vs_torch']:.2f}x", flush=True)
    results["kernels"] = rows


def run_step(results: dict, widths: list[int]) -> None:
    sys.path.insert(0, str(ROOT / "examples" / "zoo"))
    import zoo_models

    import slicer
    from slicer import strategies

    torch.manual_seed(0)
    model = zoo_models.ResNet18(tuple(widths)).train()
    generator = torch.Generator().manual_seed(0)
    batches = [(torch.randn(ARGS.batch, 3, ARGS.image, ARGS.image, generator=generator),
                torch.randint(0, 10, (ARGS.batch,), generator=generator)) for _ in range(3 + ARGS.steps)]
    precision = slicer.MixedPrecision(param_dtype="bf16", reduce_dtype="f32") if ARGS.precision == "bf16" else None
    step = slicer.training_step(model, zoo_models._classify, *batches[0], optimizer=slicer.SGD(lr=0.01),
                                precision=precision)
    program = slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=strategies.data_parallel(step, "x"))
    times = []
    with program.session(ranks=2) as session:
        for images, labels in batches:
            start = time.perf_counter()
            float(session.step(images, labels))
            times.append(time.perf_counter() - start)
    results["step"] = {"batch": ARGS.batch, "image": ARGS.image, "widths": widths, "precision": ARGS.precision,
                       "slicer_data_2_ranks_ms": statistics.median(times[3:]) * 1e3}
    for threads in (2, 1):
        torch.set_num_threads(threads)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        times = []
        for images, labels in batches:
            start = time.perf_counter()
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=ARGS.precision == "bf16"):
                loss = zoo_models._classify(model, images, labels)
            loss.backward()
            optimizer.step()
            times.append(time.perf_counter() - start)
        results["step"][f"torch_{threads}_threads_ms"] = statistics.median(times[3:]) * 1e3
    step_results = results["step"]
    step_results["vs_torch_2_threads"] = step_results["torch_2_threads_ms"] / step_results["slicer_data_2_ranks_ms"]
    print(json.dumps(step_results, indent=1))


def main() -> None:
    widths = [int(w) for w in ARGS.widths.split(",")]
    results = {"load_average": os.getloadavg(), "reps": ARGS.reps}
    if "kernels" in ARGS.parts:
        run_kernels(results, widths)
    if "step" in ARGS.parts:
        run_step(results, widths)
    if ARGS.json:
        Path(ARGS.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
