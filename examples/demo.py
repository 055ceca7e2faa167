"""The main job, for now: verify and lower a partitioned-by-loops program with
slicer-opt's passes, compile it with the JIT, run it on random data and compare
with numpy. (The MPI launcher will turn this into a run on several ranks.)

    python examples/demo.py [examples/megatron_mlp_loops.mlir]
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from slicer.lowering import compile_function

HERE = Path(__file__).parent


def reference_mlp(x, w1, b1, w2):
    return np.maximum(x @ w1 + b1, 0) @ w2


def main(path: str = str(HERE / "megatron_mlp_loops.mlir")) -> int:
    print(f"== {path}")
    print("== slicer-opt -p slicer-verify,slicer-lower-to-loops,canonicalize,cse (first lines)")
    lowered = subprocess.run(
        [sys.executable, "-m", "slicer.tools.slicer_opt", path, "-p", "slicer-verify,slicer-lower-to-loops,canonicalize,cse"],
        capture_output=True, text=True, check=True,
    ).stdout
    print("\n".join(lowered.splitlines()[:14]) + "\n  ...")
    start = time.perf_counter()
    program = compile_function(Path(path).read_text())
    print(f"== compiled @{program.name} in {time.perf_counter() - start:.2f} s")
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(spec.shape).astype(spec.dtype) for spec in program.inputs]
    times = []
    for _ in range(5):
        start = time.perf_counter()
        result = program(*arrays)
        times.append(time.perf_counter() - start)
    expected = reference_mlp(*arrays)
    error = float(np.max(np.abs(result - expected)))
    print(f"== ran in {np.median(times) * 1e3:.2f} ms (median of 5); max |error| vs numpy = {error:.2e}")
    if not np.allclose(result, expected, rtol=1e-4, atol=1e-4):
        print("results DO NOT match numpy")
        return 1
    print("results match the unpartitioned program (numpy)")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
