"""bf16 contractions (bf16 operands, f32 accumulation and result) vs torch's bf16 matmul and Slicer's own f32.

    python benchmarks/kernels_bf16.py [--quick] [--reps N] [--units auto|amx|avx512bf16|f32] [--json PATH]

`benchmarks/kernels.py` runs these rows too (its bf16 section). Cases: square matmuls 512..4096 and the GPT
shapes of `kernels.py` (the MLP's and the attention block's contractions, as the generics the programs hold).
Contenders, interleaved, median of `--reps` rounds on the calling thread's CPU time: Slicer's kernel on bf16
inputs (units: the host's best, or forced), torch's bf16 matmul on the same inputs (oneDNN, one thread:
`torch.set_num_threads(1)`), Slicer's f32 kernel of the same contraction on the f32 inputs. Targets (issue
46): >= 0.9x torch bf16, >= 4x Slicer f32. The machine is shared: figures are indicative.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import ml_dtypes
import numpy as np

from slicer.core.host import cpu_flags
from slicer.lowering import DEFAULT_PIPELINE, aligned_empty, compile_library
from slicer.lowering.contract.matrix_units import units_of_flags

BF16 = ml_dtypes.bfloat16


def einsum_fn(name: str, spec: str, sizes: dict[str, int], dtype: str) -> str:
    """A zero-initialised contraction `spec` of `dtype` operands into f32 (bf16 operands widened by extf)."""
    ins, out = spec.split("->")
    terms = ins.split(",")
    loops = list(out) + sorted(set(ins.replace(",", "")) - set(out))
    dims = ", ".join(f"d{i}" for i in range(len(loops)))

    def amap(term):
        return f"affine_map<({dims}) -> ({', '.join(f'd{loops.index(c)}' for c in term)})>"

    def ttype(term, t):
        return f"tensor<{'x'.join(str(sizes[c]) for c in term)}x{t}>"

    kinds = ", ".join('"parallel"' if c in out else '"reduction"' for c in loops)
    widen = ("" if dtype == "f32" else
             "    %w0 = arith.extf %x0 : bf16 to f32\n    %w1 = arith.extf %x1 : bf16 to f32\n")
    a, b = ("%x0", "%x1") if dtype == "f32" else ("%w0", "%w1")
    return f"""
func.func @{name}(%a0: {ttype(terms[0], dtype)}, %a1: {ttype(terms[1], dtype)}) -> {ttype(out, 'f32')} {{
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : {ttype(out, 'f32')}
  %f = linalg.fill ins(%z : f32) outs(%e : {ttype(out, 'f32')}) -> {ttype(out, 'f32')}
  %r = linalg.generic {{indexing_maps = [{', '.join(amap(t) for t in terms + [out])}], iterator_types = [{kinds}]}}
      ins(%a0, %a1 : {ttype(terms[0], dtype)}, {ttype(terms[1], dtype)}) outs(%f : {ttype(out, 'f32')}) {{
  ^bb0(%x0: {dtype}, %x1: {dtype}, %acc: f32):
{widen}    %m = arith.mulf {a}, {b} : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }} -> {ttype(out, 'f32')}
  return %r : {ttype(out, 'f32')}
}}
"""


def cases(quick: bool) -> list[tuple[str, str, dict[str, int], object]]:
    """(label, spec, sizes, torch reference taking bf16 torch tensors)."""
    S, D, H, E = 1024, 1024, 16, 64
    B, Dm, Hm = 512, 1024, 4096
    squares = (512, 1024, 2048) if quick else (512, 1024, 2048, 4096)
    result = [(f"matmul {n}", "mk,kn->mn", dict(m=n, k=n, n=n), lambda a, b: a @ b) for n in squares]
    result += [
        ("MLP x@w1 512x1024x4096", "mk,kn->mn", dict(m=B, k=Dm, n=Hm), lambda a, b: a @ b),
        ("MLP h@w2 512x4096x1024", "mk,kn->mn", dict(m=B, k=Hm, n=Dm), lambda a, b: a @ b),
        ("Linear x@W^T mk,nk->mn 512x1024x4096", "mk,nk->mn", dict(m=B, k=Dm, n=Hm), lambda a, b: a @ b.T),
        ("weight gradient x^T@dy km,kn->mn 1024x512x4096", "km,kn->mn", dict(m=Dm, k=B, n=Hm), lambda a, b: a.T @ b),
        ("attention q/k/v sd,dhe->hse", "sd,dhe->hse", dict(s=S, d=D, h=H, e=E),
         lambda x, w: (x @ w.reshape(D, H * E)).reshape(S, H, E).transpose(0, 1)),
        ("attention scores hse,hte->hst", "hse,hte->hst", dict(h=H, s=S, e=E, t=S), lambda q, k: q @ k.transpose(1, 2)),
        ("attention context hst,hte->hse", "hst,hte->hse", dict(h=H, s=S, t=S, e=E), lambda p, v: p @ v),
        ("attention output hse,hed->sd", "hse,hed->sd", dict(h=H, s=S, e=E, d=D),
         lambda c, w: c.transpose(0, 1).reshape(S, H * E) @ w.reshape(H * E, D)),
    ]
    return result[:6] if quick else result


def timed(contenders: dict, reps: int) -> dict[str, float]:
    """Median thread-CPU seconds of each callable, run interleaved after one warm-up call each."""
    for fn in contenders.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(reps):
        for name, fn in contenders.items():
            start = time.thread_time()
            fn()
            times[name].append(time.thread_time() - start)
    return {name: float(np.median(t)) for name, t in times.items()}


def run(quick: bool = False, reps: int = 5, units: str = "auto", cache: str | None = None) -> list[dict]:
    """The bf16 rows: one dict per case (ms and GFLOP/s of each contender, the two ratios of the targets)."""
    import torch  # here: the rest of the module (and --help) needs no torch

    torch.set_num_threads(1)
    chosen = units if units != "auto" else units_of_flags(cpu_flags())
    pipeline = DEFAULT_PIPELINE.with_options("slicer-kernel-contract", bf16_units=units)
    rng = np.random.default_rng(0)
    rows = []
    with tempfile.TemporaryDirectory(prefix="slicer-bench-bf16-") as scratch:
        cache = cache or scratch
        for label, spec, sizes, reference in cases(quick):
            flops = 2 * int(np.prod(list(sizes.values())))
            ours = compile_library(einsum_fn("c", spec, sizes, "bf16"), pipeline=pipeline, cache_dir=cache)["c"]
            f32 = compile_library(einsum_fn("c", spec, sizes, "f32"), cache_dir=cache)["c"]
            shapes = [tuple(sizes[c] for c in term) for term in spec.split("->")[0].split(",")]
            wide = [rng.standard_normal(s, dtype=np.float32) for s in shapes]
            narrow = [_aligned(w.astype(BF16)) for w in wide]
            wide = [_aligned(n.astype(np.float32)) for n in narrow]
            tensors = [torch.from_numpy(n.view(np.uint16)).view(torch.bfloat16) for n in narrow]
            out = ours.empty_outputs()[0]
            out32 = f32.empty_outputs()[0]
            ours(*narrow, out=out)
            expected = reference(*[t.float() for t in tensors]).numpy().reshape(out.shape)
            np.testing.assert_allclose(out, expected, rtol=1e-3, atol=1e-3 * np.sqrt(shapes[0][-1]), err_msg=label)
            t = timed({"ours": lambda ours=ours, narrow=narrow, out=out: ours(*narrow, out=out),
                       "torch": lambda reference=reference, tensors=tensors: reference(*tensors),
                       "f32": lambda f32=f32, wide=wide, out32=out32: f32(*wide, out=out32)}, reps)
            row = {"case": label, "units": chosen, **{f"{k}_ms": v * 1e3 for k, v in t.items()},
                   **{f"{k}_gflops": flops / v / 1e9 for k, v in t.items()},
                   "vs_torch_bf16": t["torch"] / t["ours"], "vs_slicer_f32": t["f32"] / t["ours"]}
            rows.append(row)
            print(f"{label:40s} bf16 ({chosen}) {row['ours_gflops']:6.0f} GF/s   torch bf16 "
                  f"{row['torch_gflops']:6.0f}   "
                  f"ours f32 {row['f32_gflops']:6.0f}   {row['vs_torch_bf16']:.2f}x torch, "
                  f"{row['vs_slicer_f32']:.2f}x f32",
                  flush=True)
    return rows


def markdown(rows: list[dict]) -> str:
    lines = ["| bf16 contraction | units | ours ms | ours GFLOP/s | torch bf16 GFLOP/s | ours f32 GFLOP/s | "
             "vs torch bf16 "
             "| vs ours f32 |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['units']} | {r['ours_ms']:.2f} | {r['ours_gflops']:.0f} | "
                     f"{r['torch_gflops']:.0f} | "
                     f"{r['f32_gflops']:.0f} | {r['vs_torch_bf16']:.2f}x | {r['vs_slicer_f32']:.2f}x |")
    return "\n".join(lines)


def _aligned(array: np.ndarray) -> np.ndarray:
    result = aligned_empty(array.shape, array.dtype)
    result[...] = array
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="squares up to 2048 and the MLP shapes only")
    parser.add_argument("--reps", type=int, default=5, help="timed rounds per case (median reported)")
    parser.add_argument("--units", default="auto", help="force the bf16 units: amx, avx512bf16 or f32")
    parser.add_argument("--json", metavar="PATH", help="write the rows as JSON to PATH")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}; host bf16 units: {units_of_flags(cpu_flags())}")
    rows = run(args.quick, args.reps, args.units)
    if args.json:
        import json

        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=1)
    print()
    print(markdown(rows))


if __name__ == "__main__":
    main()
