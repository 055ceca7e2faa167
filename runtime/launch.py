"""Starting a kernel graph on local MPI ranks and reading its results back (`slicer-run`, `Program.run`).

The launcher compiles (or finds in the cache) the kernels once, so the ranks only load them; it writes the
graph, where each kernel is (`kernels.json`, see `executor.kernel_sources`) and the job description to a job
directory, runs `python -m slicer.runtime.job` under `mpiexec`, and
returns the assembled results with the run's timings.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from slicer.core import dtypes
from slicer.core.errors import RunError
from slicer.lowering import KernelGraph

from .executor import kernel_sources, load_kernels
from .job import write_job
from .mpiexec import run_spmd
from .timings import TIMINGS_FILE, Timings


def launch(graph: KernelGraph, job_dir: Path, ranks: int, *, inputs: Sequence[str] | None = None, seed: int = 0,
           repeat: int = 1, timeout: float = 600, mpiexec: str | None = None) -> tuple[list[np.ndarray], Timings]:
    """Run `graph` on `ranks` MPI ranks with inputs from `.npy` files (or random from `seed`), `repeat` timed
    runs; results are written to and read from `job_dir`."""
    if repeat < 1:
        raise RunError(f"repeat={repeat}: give the number of timed runs, at least 1")
    kernels, backend = load_kernels(graph)
    write_job(job_dir, graph, inputs=inputs, seed=seed, repeat=repeat, kernel_sources=kernel_sources(kernels, backend))
    done = run_spmd(ranks, [sys.executable, "-m", "slicer.runtime.job", str(job_dir)], timeout=timeout, mpiexec=mpiexec)
    if done.returncode != 0:
        raise RunError(f"the SPMD job failed on {ranks} ranks (exit {done.returncode}):\n{done.stderr.strip()[-4000:]}")
    results = [dtypes.from_npy(np.load(job_dir / f"result{i}.npy"), graph.values[name].numpy_dtype)
               for i, name in enumerate(graph.results)]
    return results, Timings.from_json((job_dir / TIMINGS_FILE).read_text())
