"""The main job: partition programs and run them on local MPI ranks.

1. A 2-layer MLP, Megatron tensor parallel over a 4-device axis y (first weight's
   columns and second weight's rows over y: one all_reduce).
2. A multi-head attention block with its heads over y (nothing to communicate until
   the output projection).
   Each of these runs prints the distributed types, the collectives (why they exist,
   bytes per device), the time per step, and checks the results against the
   unpartitioned program run in one process.
3. The same MLP at a realistic size (batch 512, model 1024, hidden 4096), Megatron on
   1 and 2 ranks: median time per run of each, checked against numpy.

    python examples/demo.py
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

import slicer
from slicer.tools.slicer_run import main as slicer_run

HERE = Path(__file__).parent

JOBS = [
    ("Megatron MLP", HERE / "mlp.mlir", ["--tactic", "arg1.1=y", "--tactic", "arg3.0=y"]),
    ("attention, heads over y", HERE / "mha.mlir",
     ["--tactic", "arg1.1=y", "--tactic", "arg2.1=y", "--tactic", "arg3.1=y", "--tactic", "arg4.0=y"]),
]
LARGE = HERE / "mlp_large.mlir"
MEGATRON = "arg1.1=y;arg3.0=y"
REPEAT = 5


def realistic_size() -> int:
    """examples/mlp_large.mlir on 1 and 2 ranks (as many as this host has cores, at most 2), timed."""
    ranks = [n for n in (1, 2) if n <= (os.cpu_count() or 1)]
    print(f"\n######## Megatron MLP at a realistic size ({LARGE.name}: x 512x1024, w1 1024x4096, w2 4096x1024, "
          f"f32) on {' and '.join(map(str, ranks))} rank(s), median of {REPEAT} runs")
    rng = np.random.default_rng(0)
    # weights scaled by 1/sqrt(fan-in), as initialisers do, so that values stay O(1)
    x, w1, b1, w2 = ((rng.standard_normal(s) / np.sqrt(s[0] if len(s) > 1 else 1)).astype(np.float32)
                     for s in ((512, 1024), (1024, 4096), (4096,), (4096, 1024)))
    numpy_times = []
    for _ in range(REPEAT):
        start = time.perf_counter()
        expected = np.maximum(x @ w1 + b1, 0) @ w2
        numpy_times.append(time.perf_counter() - start)
    numpy_ms = float(np.median(numpy_times)) * 1e3
    text = LARGE.read_text()
    times = {}
    for n in ranks:
        start = time.perf_counter()
        program = slicer.compile(text, mesh=slicer.Mesh(y=n), tactics=slicer.parse_tactics(MEGATRON),
                                 source_name=str(LARGE))
        compile_s = time.perf_counter() - start
        result, timings = program.run(x, w1, b1, w2, ranks=n, repeat=REPEAT, return_timings=True)
        error = float(np.abs(result - expected).max() / np.abs(expected).max())
        if error > 1e-4:
            print(f"MISMATCH on {n} rank(s): max relative error {error:.2e}")
            return 1
        times[n] = timings.seconds * 1e3
        print(f"  {n} rank(s): {times[n]:8.1f} ms per run (compile {compile_s:.1f} s; matches numpy, max relative "
              f"error {error:.1e})")
        print("    " + timings.text().replace("\n", "\n    "))
    if len(times) == 2:
        print(f"  2 ranks are {times[1] / times[2]:.2f}x as fast as 1 rank")
    print(f"  numpy in this process (its BLAS threads, median of {REPEAT}): {numpy_ms:.1f} ms")
    return 0


def main() -> int:
    for title, program, tactics in JOBS:
        # --oversubscribe: the demo runs 4 ranks even where the machine has fewer cores.
        print(f"\n######## {title}: slicer-run {program.name} --mesh y=4 {' '.join(tactics)} --random 0 --check "
              "--oversubscribe")
        status = slicer_run([str(program), "--mesh", "y=4", *tactics, "--random", "0", "--check", "--oversubscribe"])
        if status:
            return status
    return realistic_size()


if __name__ == "__main__":
    sys.exit(main())
