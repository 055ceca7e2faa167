"""The SPMD runtime (docs/runtime.md; layer 11 of docs/architecture.md): running a kernel graph on MPI ranks
(`launch`, `job`, `executor`, `mpiexec`, `rank`), each rank's blocks (`blocks`), what the host can run
(`resources`), the run's timings (`timings`), the in-process simulator of every device (`simulator`), and the
MPI executor of redistribution plans (`plan_executor`, with `communicators`, `mpi_packing`, `shm_collectives`, and
the cost model's measurement run `calibration`).

`python -m slicer.runtime PROGRAM ...` is `slicer-run` (slicer.tools.slicer_run).

The names are loaded when first read (PEP 562, `slicer.core.lazy`): a rank's `python -m slicer.runtime.job`
imports only what running its kernel graph needs, not the launcher or the kernel compilers.
"""

from slicer.core.lazy import lazy_exports

_EXPORTS = {
    "launch": ".launch",
    **{name: ".simulator" for name in ("Simulator", "assemble", "simulate")},
    **{name: ".timings" for name in ("StepTiming", "Timings")},
}

__all__ = ["Simulator", "StepTiming", "Timings", "assemble", "launch", "simulate"]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
