"""The main job: partition two programs and run them on 4 local MPI ranks.

1. A 2-layer MLP, Megatron tensor parallel over a 4-device axis y (first weight's
   columns and second weight's rows over y: one all_reduce).
2. A multi-head attention block with its heads over y (nothing to communicate until
   the output projection).
Each run prints the distributed types, the collectives (why they exist, bytes per
device), the time per step, and checks the results against the unpartitioned
program run in one process.

    python examples/demo.py
"""

from __future__ import annotations

import sys
from pathlib import Path

from slicer.tools.slicer_run import main as slicer_run

HERE = Path(__file__).parent

JOBS = [
    ("Megatron MLP", HERE / "mlp.mlir", ["--tactic", "arg1.1=y", "--tactic", "arg3.0=y"]),
    ("attention, heads over y", HERE / "mha.mlir",
     ["--tactic", "arg1.1=y", "--tactic", "arg2.1=y", "--tactic", "arg3.1=y", "--tactic", "arg4.0=y"]),
]


def main() -> int:
    for title, program, tactics in JOBS:
        # --oversubscribe: the demo runs 4 ranks even where the machine has fewer cores.
        print(f"\n######## {title}: slicer-run {program.name} --mesh y=4 {' '.join(tactics)} --random 0 --check "
              "--oversubscribe")
        status = slicer_run([str(program), "--mesh", "y=4", *tactics, "--random", "0", "--check", "--oversubscribe"])
        if status:
            return status
    return 0


if __name__ == "__main__":
    sys.exit(main())
