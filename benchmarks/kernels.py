"""Compiled kernels vs numpy (one BLAS thread) and vs memcpy, call overhead, compile time, in one run.

    python benchmarks/kernels.py                       # tables to stdout (~2 min)
    python benchmarks/kernels.py --json kernels.json   # and the numbers as JSON
    python benchmarks/kernels.py --quick               # smaller set (squares up to 1024, no 2048)

Cases (f32):
- contractions: square matmuls 256..2048; the MLP's (B=512, D=1024, H=4096, and the per-rank halves
  on 2 ranks) and the attention block's (S=1024, D=1024, 16 heads of 64) contractions, as the
  `linalg.generic`s the programs contain; matmuls with transposed operands and a batch_matmul.
  numpy runs the same contraction as its best BLAS call (matmul on views/reshapes, no copies where
  BLAS takes the layout); GFLOP/s and the ratio numpy time / our time;
- fused elementwise chains and row reductions on 64 MiB arrays: relu(a*b+c), bias + tanh-gelu,
  softmax and layernorm over rows of 1024, each compared with memcpy (`np.copyto`) of 64 MiB in the
  same run: `vs memcpy` = (bytes the kernel must move / its time) / (bytes memcpy moves / its time),
  the kernel's bytes being each input read once and each output written once;
- matmul + bias + relu vs the matmul alone (the cost of an unfused epilogue pass);
- the scalar-loops pipeline and `llc -mcpu=x86-64` on a matmul, call overhead, compile time;
- bf16 contractions (bf16 operands, f32 accumulation: square 512..4096 and the GPT shapes) against torch's bf16
  matmul on one thread and Slicer's own f32, on the host's best bf16 units (`kernels_bf16.py`, which runs
  them alone too; `--bf16-units` forces the units, `--no-bf16` skips them).

Timing: the contenders of a case run interleaved (round robin), `--reps` rounds, median. The clock is
the CPU time of the calling thread (`time.thread_time`) when numpy has one thread (the default): on
this shared 2-core machine the other jobs preempt us for whole milliseconds, and CPU time leaves those
out; `--clock wall` uses wall time (always used when numpy has several threads). Operands are 64-byte
aligned (`aligned_empty`) and shared by both sides.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import kernels_bf16
from snippets import tanh_gelu


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON to PATH")
    parser.add_argument("--reps", type=int, default=9, help="timed rounds per case (median reported)")
    parser.add_argument("--numpy-threads", type=int, default=1, help="numpy's BLAS threads (set before numpy loads)")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                        help="thread CPU time (default) or wall time")
    parser.add_argument("--quick", action="store_true", help="fewer and smaller cases")
    parser.add_argument("--no-bf16", action="store_true", help="skip the bf16 contractions (they need torch)")
    parser.add_argument("--bf16-units", default="auto", help="bf16 units: auto, amx, avx512bf16 or f32")
    return parser.parse_args()


ARGS = parse_args()
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = str(ARGS.numpy_threads)
# Set on some machines for old OpenBLAS builds, these make a current one run an older, slower kernel (AVX2
# Haswell instead of AVX-512 SkylakeX: numpy at ~125 instead of ~215-265 GFLOP/s); numpy runs without them,
# as `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/kernels.py` would. Unset before numpy
# loads OpenBLAS, which reads them once; the JSON records what was unset and the core OpenBLAS chose.
UNSET_OPENBLAS = {_var: os.environ.pop(_var) for _var in ("OPENBLAS_CORETYPE",
                                                          "OPENBLAS_L2_SIZE") if _var in os.environ}

import numpy as np  # noqa: E402 - after the thread limits

from slicer.lowering import LOOPS_PIPELINE, Target, aligned_empty, compile_function, compile_library  # noqa: E402

CLOCK = time.thread_time if ARGS.clock == "cpu" and ARGS.numpy_threads == 1 else time.perf_counter


def timed(contenders: dict, reps: int) -> dict[str, float]:
    """Median seconds of each callable, run interleaved after one warm-up call each."""
    for fn in contenders.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(reps):
        for name, fn in contenders.items():
            start = CLOCK()
            fn()
            times[name].append(CLOCK() - start)
    return {name: float(np.median(t)) for name, t in times.items()}


def aligned(array: np.ndarray) -> np.ndarray:
    result = aligned_empty(array.shape, array.dtype)
    result[...] = array
    return result


# ---------------------------------------------------------------------------------------------------
# Programs
# ---------------------------------------------------------------------------------------------------


def contraction_fn(name: str, spec: str, sizes: dict[str, int], scale: float | None = None) -> str:
    """A zero-initialised linalg.generic computing einsum `spec` (letters: loop dims)."""
    ins, out = spec.split("->")
    terms = ins.split(",")
    loops = list(out) + sorted(set(ins.replace(",", "")) - set(out))
    dims = ", ".join(f"d{i}" for i in range(len(loops)))

    def amap(term):
        return f"affine_map<({dims}) -> ({', '.join(f'd{loops.index(c)}' for c in term)})>"

    def ttype(term):
        return f"tensor<{'x'.join(str(sizes[c]) for c in term)}xf32>"

    kinds = ", ".join('"parallel"' if c in out else '"reduction"' for c in loops)
    product = "%m" if scale is None else "%ms"
    scaled = "" if scale is None else "    %ms = arith.mulf %m, %scale : f32\n"
    return f"""
func.func @{name}({', '.join(f'%a{i}: {ttype(t)}' for i, t in enumerate(terms))}) -> {ttype(out)} {{
  %z = arith.constant 0.0 : f32
  %scale = arith.constant {scale or 1.0} : f32
  %e = tensor.empty() : {ttype(out)}
  %f = linalg.fill ins(%z : f32) outs(%e : {ttype(out)}) -> {ttype(out)}
  %r = linalg.generic {{indexing_maps = [{', '.join(amap(t) for t in terms + [out])}], iterator_types = [{kinds}]}}
      ins({', '.join(f'%a{i}' for i in range(len(terms)))} : {', '.join(ttype(t) for t in terms)})
          outs(%f : {ttype(out)}) {{
  ^bb0({', '.join(f'%x{i}: f32' for i in range(len(terms)))}, %acc: f32):
    %m = arith.mulf %x0, %x1 : f32
{scaled}    %s = arith.addf %acc, {product} : f32
    linalg.yield %s : f32
  }} -> {ttype(out)}
  return %r : {ttype(out)}
}}
"""


def matmul_fn(name: str, m: int, k: int, n: int, epilogue: bool = False, batch: int | None = None) -> str:
    if batch:
        a, b, c = f"tensor<{batch}x{m}x{k}xf32>", f"tensor<{batch}x{k}x{n}xf32>", f"tensor<{batch}x{m}x{n}xf32>"
        op = "linalg.batch_matmul"
    else:
        a, b, c = f"tensor<{m}x{k}xf32>", f"tensor<{k}x{n}xf32>", f"tensor<{m}x{n}xf32>"
        op = "linalg.matmul"
    head = f"func.func @{name}(%a: {a}, %b: {b}" + (f", %bias: tensor<{n}xf32>" if epilogue else "") + f") -> {c} {{"
    body = f"""
  %e = tensor.empty() : {c}
  %z = arith.constant 0.0 : f32
  %f = linalg.fill ins(%z : f32) outs(%e : {c}) -> {c}
  %p = {op} ins(%a, %b : {a}, {b}) outs(%f : {c}) -> {c}"""
    if epilogue:
        body += f"""
  %bb = linalg.broadcast ins(%bias : tensor<{n}xf32>) outs(%e : {c}) dimensions = [0]
  %s = arith.addf %p, %bb : {c}
  %zeros = arith.constant dense<0.0> : {c}
  %r = arith.maximumf %s, %zeros : {c}
  return %r : {c}
}}
"""
    else:
        body += f"\n  return %p : {c}\n}}\n"
    return head + body


def chain_fn(name: str, n: int) -> str:
    t = f"tensor<{n}xf32>"
    return f"""func.func @{name}(%a: {t}, %b: {t}, %c: {t}) -> {t} {{
  %m = arith.mulf %a, %b : {t}
  %s = arith.addf %m, %c : {t}
  %zero = arith.constant dense<0.0> : {t}
  %r = arith.maximumf %s, %zero : {t}
  return %r : {t}
}}
"""


def bias_gelu_fn(name: str, r: int, c: int) -> str:
    return f"""
func.func @{name}(%x: tensor<{r}x{c}xf32>, %b: tensor<{c}xf32>) -> tensor<{r}x{c}xf32> {{
  %e = tensor.empty() : tensor<{r}x{c}xf32>
  %y = linalg.generic {{indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (j)>,
      affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}}
      ins(%x, %b : tensor<{r}x{c}xf32>, tensor<{c}xf32>) outs(%e : tensor<{r}x{c}xf32>) {{
  ^bb0(%v0: f32, %bv: f32, %o: f32):
    %v = arith.addf %v0, %bv : f32
{tanh_gelu("v", "g")}    linalg.yield %g : f32
  }} -> tensor<{r}x{c}xf32>
  return %y : tensor<{r}x{c}xf32>
}}
"""


def rows_example(name: str, rows: int, cols: int) -> str:
    """examples/softmax.mlir or layernorm.mlir at rows x cols."""
    text = (Path(__file__).resolve().parents[1] / "examples" / f"{name}.mlir").read_text()
    return (text.replace("8x16", f"{rows}x{cols}").replace("tensor<8xf32>", f"tensor<{rows}xf32>")
            .replace("tensor<16xf32>", f"tensor<{cols}xf32>").replace("16.0 : f32", f"{cols}.0 : f32"))


# ---------------------------------------------------------------------------------------------------
# Contraction cases: (name, MLIR function, input shapes, numpy reference, flops)
# ---------------------------------------------------------------------------------------------------


def contraction_cases(quick: bool) -> list[tuple]:
    S, D, Hd, E = 1024, 1024, 16, 64
    B, Dm, H = 512, 1024, 4096
    cases = []
    squares = (256, 512, 1024) if quick else (256, 512, 1024, 2048)
    for n in squares:
        cases.append((f"matmul {n}", matmul_fn(f"mm{n}", n, n, n), [(n, n), (n, n)], lambda a, b,
                      o: np.matmul(a, b, out=o), 2 * n**3))
    mlp = [("MLP x@w1 512x1024x4096", B, Dm, H), ("MLP h@w2 512x4096x1024", B, H, Dm)]
    if not quick:
        mlp += [("MLP x@w1, 2-rank half 512x1024x2048", B, Dm, H // 2),
                ("MLP h@w2, 2-rank half 512x2048x1024", B, H // 2, Dm)]
    for label, m, k, n in mlp:
        cases.append((label, matmul_fn(f"mlp_{m}_{k}_{n}", m, k, n), [(m, k), (k, n)], lambda a, b,
                      o: np.matmul(a, b, out=o), 2 * m * k * n))
    attention = [
        ("attention q/k/v sd,dhe->hse", "sd,dhe->hse", dict(s=S, d=D, h=Hd, e=E), None,
         lambda x, w, o: np.matmul(x, w.reshape(D, Hd * E))),
        ("attention scores hse,hte->hst (x 1/8)", "hse,hte->hst", dict(h=Hd, s=S, e=E, t=S), 0.125,
         lambda q, k, o: np.matmul(q, k.transpose(0, 2, 1), out=o)),
        ("attention context hst,hte->hse", "hst,hte->hse", dict(h=Hd, s=S, t=S, e=E), None,
         lambda p, v, o: np.matmul(p, v, out=o)),
        ("attention output hse,hed->sd", "hse,hed->sd", dict(h=Hd, s=S, e=E, d=D), None,
         lambda c, w, o: np.matmul(c.transpose(1, 0, 2).reshape(S, Hd * E), w.reshape(Hd * E, D), out=o)),
        ("transposed B mk,nk->mn 1024", "mk,nk->mn", dict(m=1024, k=1024, n=1024), None, lambda a, b,
         o: np.matmul(a, b.T, out=o)),
        ("transposed A km,kn->mn 1024", "km,kn->mn", dict(m=1024, k=1024, n=1024), None, lambda a, b,
         o: np.matmul(a.T, b, out=o)),
        ("both transposed km,nk->mn 1024", "km,nk->mn", dict(m=1024, k=1024, n=1024), None, lambda a, b,
         o: np.matmul(a.T, b.T, out=o)),
    ]
    if quick:
        attention = attention[:4]
    for i, (label, spec, sizes, scale, ref) in enumerate(attention):
        shapes = [tuple(sizes[c] for c in term) for term in spec.split("->")[0].split(",")]
        flops = 2 * int(np.prod(list(sizes.values())))
        if scale is not None:
            ref = (lambda f, s: (lambda a, b, o: np.multiply(f(a, b, o), s, out=o)))(ref, scale)
        cases.append((label, contraction_fn(f"c{i}", spec, sizes, scale), shapes, ref, flops))
    if not quick:
        cases.append(("batch_matmul 16x256x256x256", matmul_fn("bmm", 256, 256, 256, batch=16),
                      [(16, 256, 256), (16, 256, 256)], lambda a, b, o: np.matmul(a, b, out=o), 2 * 16 * 256**3))
    return cases


# ---------------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------------


def openblas_core() -> str:
    """The kernel family numpy's OpenBLAS runs on this CPU (e.g. SkylakeX, Haswell), or "unknown"."""
    import ctypes
    import glob

    for path in glob.glob(os.path.join(os.path.dirname(np.__file__) + ".libs", "*openblas*")):
        library = ctypes.CDLL(path)
        for symbol in ("scipy_openblas_get_corename64_", "openblas_get_corename64_", "openblas_get_corename"):
            function = getattr(library, symbol, None)
            if function is not None:
                function.restype = ctypes.c_char_p
                return function().decode()
    return "unknown"


def main() -> None:
    rng = np.random.default_rng(0)
    results: dict = {"machine": f"{platform.machine()} {os.cpu_count()} cores", "reps": ARGS.reps,
                     "numpy_threads": ARGS.numpy_threads,
                     "clock": "thread cpu" if CLOCK is time.thread_time else "wall",
                     "load_average": os.getloadavg(), "openblas_unset": UNSET_OPENBLAS,
                     "openblas_core": openblas_core(), "contractions": [], "chains": [], "other": []}
    print(
        f"numpy's OpenBLAS core: {results['openblas_core']}"
        + (
            f" (unset for this run: {', '.join(f'{k}={v}' for k, v in UNSET_OPENBLAS.items())})"
            if UNSET_OPENBLAS
            else ""
        )
    )
    cases = contraction_cases(ARGS.quick)
    elements = 1 << 22 if ARGS.quick else 1 << 24
    rows, cols = elements // 1024, 1024
    program = "".join(text for _, text, _, _, _ in cases)
    program += chain_fn("chain", elements) + bias_gelu_fn("bias_gelu", rows, cols)
    program += rows_example("softmax", rows, cols) + rows_example("layernorm", rows, cols)
    program += matmul_fn("mm_epilogue", 512, 512, 512, epilogue=True) + matmul_fn("mm_plain", 512, 512, 512)

    with tempfile.TemporaryDirectory(prefix="slicer-bench-cache-") as cache:
        start = time.perf_counter()
        library = compile_library(program, cache_dir=cache)
        cold = time.perf_counter() - start
        start = time.perf_counter()
        again = compile_library(program, cache_dir=cache)
        warm = time.perf_counter() - start
        assert again.cache_hit and not library.cache_hit
        results["compile_s"] = {"kernels": len(library), "cold": cold, "cold_breakdown": library.meta["timings"],
                                "cached_same_process": warm,
                                "cached_fresh_process": _fresh_process_compile_seconds(program, cache)}
        kernels = list(library)

        # --- contractions
        for (label, _, shapes, ref, flops), kernel in zip(cases, kernels):
            arrays = [aligned(rng.standard_normal(s, dtype=np.float32)) for s in shapes]
            out = kernel.empty_outputs()[0]
            ref_out = aligned_empty(out.shape, np.float32)
            kernel(*arrays, out=out)
            expected = ref(*arrays, ref_out)
            expected = ref_out if expected is None else expected
            np.testing.assert_allclose(out, _canonical(label, expected, out.shape), rtol=2e-3, atol=2e-3, err_msg=label)
            t = timed({"ours": lambda kernel=kernel, arrays=arrays, out=out: kernel(*arrays, out=out),
                       "numpy": lambda ref=ref, arrays=arrays, ref_out=ref_out: ref(*arrays, ref_out)}, ARGS.reps)
            row = {"case": label, "ours_ms": t["ours"] * 1e3, "numpy_ms": t["numpy"] * 1e3,
                   "speedup": t["numpy"] / t["ours"],
                   "ours_gflops": flops / t["ours"] / 1e9, "numpy_gflops": flops / t["numpy"] / 1e9}
            results["contractions"].append(row)
            print(f"{label:40s} ours {row['ours_ms']:8.2f} ms {row['ours_gflops']:5.0f} GF/s   numpy "
                  f"{row['numpy_ms']:8.2f} ms "
                  f"{row['numpy_gflops']:5.0f} GF/s   {row['speedup']:.2f}x", flush=True)
        byname = {k.name: k for k in kernels}

        # --- fused chains vs memcpy
        big = aligned(rng.standard_normal(elements, dtype=np.float32))
        copy_out = aligned_empty(elements, np.float32)

        def memcpy():
            np.copyto(copy_out, big)

        a, b, c = (aligned(rng.standard_normal(elements, dtype=np.float32)) for _ in range(3))
        out1 = aligned_empty(elements, np.float32)
        x = aligned(rng.standard_normal((rows, cols), dtype=np.float32))
        bias = aligned(rng.standard_normal(cols, dtype=np.float32))
        gamma, beta = aligned(np.ones(cols, np.float32)), aligned(np.zeros(cols, np.float32))
        out2 = aligned_empty((rows, cols), np.float32)
        tmp = aligned_empty((rows, cols), np.float32)

        def np_chain():
            np.multiply(a, b, out=out1)
            np.add(out1, c, out=out1)
            np.maximum(out1, 0, out=out1)

        def np_gelu():
            np.add(x, bias, out=tmp)
            h = tmp
            np.multiply(0.5 * h, 1 + np.tanh(0.7978845608 * (h + 0.044715 * h * h * h)), out=out2)

        def np_softmax():
            np.subtract(x, x.max(1, keepdims=True), out=out2)
            np.exp(out2, out=out2)
            np.divide(out2, out2.sum(1, keepdims=True), out=out2)

        def np_layernorm():
            np.subtract(x, x.mean(1, keepdims=True), out=out2)
            var = np.mean(out2 * out2, 1, keepdims=True)
            np.divide(out2, np.sqrt(var + 1e-5), out=out2)
            np.multiply(out2, gamma, out=out2)
            np.add(out2, beta, out=out2)

        nbytes = elements * 4
        chains = [
            (f"relu(a*b+c) {elements >> 20}M", lambda: byname["chain"](a, b, c, out=out1), np_chain, 4 * nbytes,
             lambda: np.testing.assert_allclose(byname["chain"](a, b, c), np.maximum(a * b + c, 0), rtol=1e-6)),
            (f"bias + tanh-gelu {rows}x{cols}", lambda: byname["bias_gelu"](x, bias, out=out2), np_gelu, 2 * nbytes,
             lambda: (np_gelu(), np.testing.assert_allclose(byname["bias_gelu"](x, bias), out2, rtol=1e-5, atol=1e-5))),
            (f"softmax rows {rows}x{cols}", lambda: byname["softmax"](x, out=out2), np_softmax, 2 * nbytes,
             lambda: (np_softmax(), np.testing.assert_allclose(byname["softmax"](x), out2, rtol=1e-5, atol=1e-8))),
            (f"layernorm rows {rows}x{cols}", lambda: byname["layernorm"](x, gamma, beta, out=out2), np_layernorm,
             2 * nbytes, lambda: (np_layernorm(),
                      np.testing.assert_allclose(byname["layernorm"](x, gamma, beta), out2, rtol=1e-4, atol=1e-4))),
        ]
        for label, ours, ref, moved, check in chains:
            check()
            t = timed({"ours": ours, "memcpy": memcpy, "numpy": ref}, ARGS.reps)
            bandwidth = moved / t["ours"]
            memcpy_bandwidth = 2 * nbytes / t["memcpy"]
            row = {"case": label, "ours_ms": t["ours"] * 1e3, "memcpy_ms": t["memcpy"] * 1e3,
                   "numpy_ms": t["numpy"] * 1e3,
                   "ours_gib_s": bandwidth / 2**30, "memcpy_gib_s": memcpy_bandwidth / 2**30,
                   "vs_memcpy": bandwidth / memcpy_bandwidth, "vs_numpy": t["numpy"] / t["ours"]}
            results["chains"].append(row)
            print(f"{label:40s} ours {row['ours_ms']:8.2f} ms {row['ours_gib_s']:5.1f} GiB/s   memcpy "
                  f"{row['memcpy_gib_s']:5.1f} GiB/s "
                  f"-> {row['vs_memcpy']:.2f}x memcpy   numpy {row['numpy_ms']:8.2f} ms", flush=True)

        # --- epilogue, scalar loops, generic target
        n = 512
        xa, wa = aligned(rng.standard_normal((n, n),
                                             dtype=np.float32)), aligned(rng.standard_normal((n, n), dtype=np.float32))
        ba = aligned(rng.standard_normal(n, dtype=np.float32))
        y = aligned_empty((n, n), np.float32)
        np.testing.assert_allclose(byname["mm_epilogue"](xa, wa, ba), np.maximum(xa @ wa + ba, 0), rtol=2e-3, atol=2e-3)
        loops = compile_library(matmul_fn("mm", n // 2, n // 2, n // 2), cache_dir=cache, pipeline=LOOPS_PIPELINE)["mm"]
        generic = compile_library(matmul_fn("mm", n, n, n), cache_dir=cache, target=Target(cpu="x86-64"))["mm"]
        half = [aligned(xa[: n // 2, : n // 2]), aligned(wa[: n // 2, : n // 2])]
        yh = aligned_empty((n // 2, n // 2), np.float32)
        t = timed({"epilogue": lambda: byname["mm_epilogue"](xa, wa, ba, out=y),
                   "plain": lambda: byname["mm_plain"](xa, wa, out=y),
                   "x86-64": lambda: generic(xa, wa, out=y)}, ARGS.reps)
        t_loops = timed({"loops": lambda: loops(*half, out=yh), "plain": lambda: byname["mm256"](*half, out=yh)},
                        max(3, ARGS.reps // 3))
        results["other"] = [
            {
                "case": "matmul 512 + bias + relu (a second pass)",
                "ms": t["epilogue"] * 1e3,
                "note": f"{t['epilogue'] / t['plain'] - 1:+.1%} over the matmul alone ({t['plain'] * 1e3:.3f} ms)",
            },
            {
                "case": "matmul 512, llc -mcpu=x86-64",
                "ms": t["x86-64"] * 1e3,
                "note": f"-mcpu=native is {t['x86-64'] / t['plain']:.1f}x faster",
            },
            {
                "case": "matmul 256, scalar loops pipeline",
                "ms": t_loops["loops"] * 1e3,
                "note": f"the default pipeline is {t_loops['loops'] / t_loops['plain']:.0f}x faster",
            },
        ]
        for row in results["other"]:
            print(f"{row['case']:40s} {row['ms']:8.3f} ms  {row['note']}", flush=True)

        # --- call overhead on a tiny kernel
        tiny_text = chain_fn("tiny", 16)
        tiny = compile_library(tiny_text, cache_dir=cache)["tiny"]
        jit = compile_function(tiny_text)
        v = [np.ones(16, np.float32) for _ in range(3)]
        rotating = [[np.ones(16, np.float32) for _ in range(3)] for _ in range(8)]  # new arrays, as a runtime's
        o = np.empty(16, np.float32)
        calls = 20000
        turn = itertools.count()
        # a kernel returning 48 arrays, as a training step's optimizer kernels do (one per parameter and moment)
        outs = ", ".join(["tensor<16xf32>"] * 48)
        many = compile_library(
            f"func.func @many(%a: tensor<16xf32>) -> ({outs}) {{\n"
            + "".join(f"  %r{i} = arith.addf %a, %a : tensor<16xf32>\n" for i in range(48))
            + f"  return {', '.join(f'%r{i}' for i in range(48))} : {outs}\n}}\n", cache_dir=cache)["many"]
        results["call_overhead_us"] = {
            "bound_call": _per_call_us(tiny.bind(*v, out=o), calls),
            "same_arrays": _per_call_us(lambda: tiny(*v, out=o), calls),
            "other_arrays": _per_call_us(lambda: tiny(*rotating[next(turn) % 8], out=o), calls),
            "fresh_outputs": _per_call_us(lambda: tiny(*v), calls),
            "fresh_outputs_48": _per_call_us(lambda: many(v[0]), calls // 10),
            "fresh_descriptors": _per_call_us(lambda: tiny.call_uncached(*v, out=[o]), calls // 4),
            "jit_execution_engine": _per_call_us(lambda: jit(*v), calls // 40),
        }

    if not ARGS.no_bf16:
        results["bf16_contractions"] = kernels_bf16.run(ARGS.quick, max(3, ARGS.reps // 2), ARGS.bf16_units)
    if ARGS.json:
        Path(ARGS.json).write_text(json.dumps(results, indent=1))
    print()
    print(markdown(results))
    if results.get("bf16_contractions"):
        print()
        print(kernels_bf16.markdown(results["bf16_contractions"]))


def _canonical(label: str, expected, shape) -> np.ndarray:
    """numpy's result in the kernel's layout (q/k/v projections come out as (s, h*e))."""
    expected = np.asarray(expected)
    if label.startswith("attention q"):
        s, h, e = shape[1], shape[0], shape[2]
        return expected.reshape(s, h, e).transpose(1, 0, 2)
    return expected.reshape(shape)


def _per_call_us(fn, calls: int) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def _fresh_process_compile_seconds(program: str, cache: str) -> float:
    """compile_library of the same program in a new interpreter (imports excluded): a pure cache hit."""
    script = (
        "import sys, time\nfrom slicer.lowering import compile_library, cache_stats\n"
        "text = open(sys.argv[1]).read()\nstart = time.perf_counter()\n"
        "lib = compile_library(text, cache_dir=sys.argv[2])\nelapsed = time.perf_counter() - start\n"
        "assert lib.cache_hit and cache_stats().misses == 0\nprint(elapsed)\n"
    )
    with tempfile.NamedTemporaryFile("w", suffix=".mlir", delete=False) as handle:
        handle.write(program)
    try:
        done = subprocess.run([sys.executable, "-c", script, handle.name, cache], capture_output=True, text=True,
                              check=True)
    finally:
        os.unlink(handle.name)
    return float(done.stdout.strip().splitlines()[-1])


def markdown(results: dict) -> str:
    lines = [f"f32, median of {results['reps']} interleaved rounds, clock: {results['clock']}, numpy threads: "
             f"{results['numpy_threads']}, load average {results['load_average'][0]:.1f}", "",
             "| contraction | ours ms | ours GFLOP/s | numpy ms | numpy GFLOP/s | speedup |",
             "|---|---|---|---|---|---|"]
    for c in results["contractions"]:
        lines.append(f"| {c['case']} | {c['ours_ms']:.2f} | {c['ours_gflops']:.0f} | {c['numpy_ms']:.2f} | "
                     f"{c['numpy_gflops']:.0f} | {c['speedup']:.2f}x |")
    lines += ["", "| fused chain (64 MiB arrays) | ours ms | ours GiB/s | memcpy GiB/s | vs memcpy | numpy ms "
                  "| vs numpy |",
              "|---|---|---|---|---|---|---|"]
    for c in results["chains"]:
        lines.append(f"| {c['case']} | {c['ours_ms']:.2f} | {c['ours_gib_s']:.1f} | {c['memcpy_gib_s']:.1f} | "
                     f"{c['vs_memcpy']:.2f}x | {c['numpy_ms']:.2f} | {c['vs_numpy']:.2f}x |")
    lines += ["", "| other | ms | note |", "|---|---|---|"]
    for c in results["other"]:
        lines.append(f"| {c['case']} | {c['ms']:.3f} | {c['note']} |")
    o, s = results["call_overhead_us"], results["compile_s"]
    lines += [
        "",
        f"Call overhead (16-element kernel, us per call): bound call {o['bound_call']:.2f}, "
        f"same arrays {o['same_arrays']:.2f}, other arrays every call {o['other_arrays']:.2f}, outputs made "
        "by the call "
        f"{o['fresh_outputs']:.2f} "
        f"(48 of them: {o['fresh_outputs_48']:.2f}), "
        f"descriptor objects built per call {o['fresh_descriptors']:.2f}, JIT (ExecutionEngine, mlir.runtime "
        f"descriptors) {o['jit_execution_engine']:.2f}.",
        f"Compile of the {s['kernels']} kernels above: cold {s['cold']:.2f} s "
        f"({', '.join(f'{k} {v:.2f}' for k, v in s['cold_breakdown'].items())}), "
        f"cached {s['cached_same_process'] * 1e3:.1f} ms in the same process, {s['cached_fresh_process'] * 1e3:.1f} ms "
        "in a fresh one.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
