"""Compiled kernels vs numpy, call overhead, and compile time cold vs cached, in one run.

    python benchmarks/kernels.py                       # table to stdout (~1 min)
    python benchmarks/kernels.py --json kernels.json   # and the numbers as JSON
    python benchmarks/kernels.py --numpy-threads 1     # numpy/BLAS on one thread, like our kernels

Cases (f32): square matmuls, the elementwise chain relu(a*b+c) on 16M elements
(one fused kernel vs numpy's three passes), and matmul + bias + relu. Our
kernels are single-threaded; numpy uses its BLAS threads unless told otherwise.
Operands are 64-byte aligned (`aligned_empty`) and shared by both sides.
Times are medians over `--reps` calls with preallocated outputs; `speedup` is
numpy time / our time (> 1: we are faster).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON to PATH")
    parser.add_argument("--reps", type=int, default=7, help="timed repetitions per case (median reported)")
    parser.add_argument("--numpy-threads", type=int, help="limit numpy's BLAS threads (set before numpy loads)")
    parser.add_argument("--sizes", default="256,512,1024", help="square matmul sizes")
    parser.add_argument("--chain-elements", type=int, default=1 << 24, help="elements of the elementwise chain")
    return parser.parse_args()


ARGS = parse_args()
if ARGS.numpy_threads:
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(ARGS.numpy_threads)

import numpy as np  # noqa: E402 - after the thread limits

from slicer.lowering import LOOPS_PIPELINE, Target, aligned_empty, compile_function, compile_library  # noqa: E402


def median_seconds(fn, reps: int) -> float:
    fn()  # warm-up: page faults, caches, lazy symbol binding
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def aligned(array: np.ndarray) -> np.ndarray:
    """A 64-byte aligned copy: both ours and numpy run on the same aligned buffers."""
    result = aligned_empty(array.shape, array.dtype)
    result[...] = array
    return result


def matmul_fn(name: str, n: int, epilogue: bool = False) -> str:
    t = f"tensor<{n}x{n}xf32>"
    head = f"func.func @{name}(%a: {t}, %b: {t}" + (f", %bias: tensor<{n}xf32>" if epilogue else "") + f") -> {t} {{"
    body = f"""
  %e = tensor.empty() : {t}
  %z = arith.constant 0.0 : f32
  %f = linalg.fill ins(%z : f32) outs(%e : {t}) -> {t}
  %p = linalg.matmul ins(%a, %b : {t}, {t}) outs(%f : {t}) -> {t}"""
    if epilogue:
        body += f"""
  %bb = linalg.broadcast ins(%bias : tensor<{n}xf32>) outs(%e : {t}) dimensions = [0]
  %s = arith.addf %p, %bb : {t}
  %zeros = arith.constant dense<0.0> : {t}
  %r = arith.maximumf %s, %zeros : {t}
  return %r : {t}
}}
"""
    else:
        body += f"\n  return %p : {t}\n}}\n"
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


def main() -> None:
    sizes = [int(s) for s in ARGS.sizes.split(",")]
    n_chain = ARGS.chain_elements
    epilogue_n = 512
    program = "".join(matmul_fn(f"mm{n}", n) for n in sizes) + chain_fn("chain", n_chain) + matmul_fn("mlp", epilogue_n, epilogue=True)
    rng = np.random.default_rng(0)
    results: dict = {"machine": f"{platform.machine()} {platform.processor() or ''}".strip(), "reps": ARGS.reps,
                     "numpy_threads": ARGS.numpy_threads or "default", "cases": []}

    with tempfile.TemporaryDirectory(prefix="slicer-bench-cache-") as cache:
        # --- compile time: cold (empty cache), cached in this process, cached in a fresh process
        start = time.perf_counter()
        library = compile_library(program, cache_dir=cache)
        cold = time.perf_counter() - start
        start = time.perf_counter()
        again = compile_library(program, cache_dir=cache)
        warm = time.perf_counter() - start
        assert again.cache_hit and not library.cache_hit
        fresh = _fresh_process_compile_seconds(program, cache)
        results["compile_s"] = {
            "kernels": len(library),
            "cold": cold,
            "cold_breakdown": library.meta["timings"],
            "cached_same_process": warm,
            "cached_fresh_process": fresh,
        }

        cases = results["cases"]

        def record(name: str, ours: float, numpy_time: float, note: str = "") -> None:
            cases.append({"case": name, "ours_ms": ours * 1e3, "numpy_ms": numpy_time * 1e3, "speedup": numpy_time / ours, "note": note})
            print(f"{name:32s} ours {ours * 1e3:9.3f} ms   numpy {numpy_time * 1e3:9.3f} ms   speedup {numpy_time / ours:5.2f}x  {note}", flush=True)

        # --- matmuls
        loops = compile_library(matmul_fn("mm", sizes[0]), cache_dir=cache, pipeline=LOOPS_PIPELINE)["mm"]
        generic = compile_library(matmul_fn("mm", sizes[-1] if sizes[-1] <= 512 else 512), cache_dir=cache, target=Target(cpu="x86-64"))["mm"]
        for n in sizes:
            a, b = aligned(rng.standard_normal((n, n), dtype=np.float32)), aligned(rng.standard_normal((n, n), dtype=np.float32))
            c = aligned_empty((n, n), np.float32)
            kernel = library[f"mm{n}"]
            kernel(a, b, out=c)
            np.testing.assert_allclose(c, a @ b, rtol=2e-3, atol=2e-3)
            ours = median_seconds(lambda: kernel(a, b, out=c), ARGS.reps)
            ref = median_seconds(lambda: np.matmul(a, b, out=c), ARGS.reps)
            record(f"matmul {n}", ours, ref, f"{2 * n**3 / ours / 1e9:.0f} GFLOP/s")
            if n == sizes[0]:
                t = median_seconds(lambda: loops(a, b, out=c), max(3, ARGS.reps // 2))
                record(f"matmul {n} (scalar loops pipeline)", t, ref, f"vectorized is {t / ours:.1f}x faster")
            if n == generic.inputs[0].shape[0]:
                t = median_seconds(lambda: generic(a, b, out=c), ARGS.reps)
                record(f"matmul {n} (llc -mcpu=x86-64)", t, ref, f"-mcpu=native is {t / ours:.1f}x faster")

        # --- the elementwise chain: one fused pass vs numpy's passes
        a, b, c = (aligned(rng.standard_normal(n_chain, dtype=np.float32)) for _ in range(3))
        out = aligned_empty(n_chain, np.float32)
        chain = library["chain"]
        chain(a, b, c, out=out)
        np.testing.assert_allclose(out, np.maximum(a * b + c, 0), rtol=1e-6)

        def numpy_chain():
            np.multiply(a, b, out=out)
            np.add(out, c, out=out)
            np.maximum(out, 0, out=out)

        ours = median_seconds(lambda: chain(a, b, c, out=out), ARGS.reps)
        gib = 4 * n_chain * 4 / 2**30
        record(f"relu(a*b+c) {n_chain / 2**20:.0f}M", ours, median_seconds(numpy_chain, ARGS.reps), f"{gib / ours:.1f} GiB/s; numpy with out=")
        record(f"relu(a*b+c) {n_chain / 2**20:.0f}M", ours, median_seconds(lambda: np.maximum(a * b + c, 0), ARGS.reps), "numpy expression")

        # --- matmul + bias + relu
        n = epilogue_n
        x, w = aligned(rng.standard_normal((n, n), dtype=np.float32)), aligned(rng.standard_normal((n, n), dtype=np.float32))
        bias = aligned(rng.standard_normal(n, dtype=np.float32))
        y = aligned_empty((n, n), np.float32)
        mlp = library["mlp"]
        mlp(x, w, bias, out=y)
        np.testing.assert_allclose(y, np.maximum(x @ w + bias, 0), rtol=2e-3, atol=2e-3)

        def numpy_mlp():
            np.matmul(x, w, out=y)
            np.add(y, bias, out=y)
            np.maximum(y, 0, out=y)

        record(f"matmul+bias+relu {n}", median_seconds(lambda: mlp(x, w, bias, out=y), ARGS.reps), median_seconds(numpy_mlp, ARGS.reps))

        # --- call overhead on a tiny kernel
        tiny_text = chain_fn("tiny", 16)
        tiny = compile_library(tiny_text, cache_dir=cache)["tiny"]
        jit = compile_function(tiny_text)
        v = [np.ones(16, np.float32) for _ in range(3)]
        o = np.empty(16, np.float32)
        calls = 20000
        results["call_overhead_us"] = {
            "bound_call": _per_call_us(tiny.bind(*v, out=o), calls),
            "cached_descriptors": _per_call_us(lambda: tiny(*v, out=o), calls),
            "fresh_descriptors": _per_call_us(lambda: tiny.call_uncached(*v, out=[o]), calls // 4),
            "jit_execution_engine": _per_call_us(lambda: jit(*v), calls // 40),
        }
        print("call overhead (us):", json.dumps({k: round(v, 2) for k, v in results["call_overhead_us"].items()}))
        print("compile (s):", json.dumps(results["compile_s"], default=lambda x: round(x, 3)))

    if ARGS.json:
        Path(ARGS.json).write_text(json.dumps(results, indent=1))
    print()
    print(markdown(results))


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
        done = subprocess.run([sys.executable, "-c", script, handle.name, cache], capture_output=True, text=True, check=True)
    finally:
        os.unlink(handle.name)
    return float(done.stdout.strip().splitlines()[-1])


def markdown(results: dict) -> str:
    lines = [
        f"f32, median of {results['reps']}, numpy threads: {results['numpy_threads']}",
        "| case | ours ms | numpy ms | speedup | note |",
        "|---|---|---|---|---|",
    ]
    for c in results["cases"]:
        lines.append(f"| {c['case']} | {c['ours_ms']:.3f} | {c['numpy_ms']:.3f} | {c['speedup']:.2f}x | {c['note']} |")
    o, s = results["call_overhead_us"], results["compile_s"]
    lines += [
        "",
        f"Call overhead (16-element kernel, us per call): bound call {o['bound_call']:.2f}, "
        f"cached descriptors {o['cached_descriptors']:.2f}, "
        f"fresh descriptors {o['fresh_descriptors']:.2f}, JIT (ExecutionEngine, mlir.runtime descriptors) {o['jit_execution_engine']:.2f}.",
        f"Compile of the {s['kernels']} kernels above: cold {s['cold']:.2f} s "
        f"({', '.join(f'{k} {v:.2f}' for k, v in s['cold_breakdown'].items())}), "
        f"cached {s['cached_same_process'] * 1e3:.1f} ms in the same process, {s['cached_fresh_process'] * 1e3:.1f} ms in a fresh one.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
