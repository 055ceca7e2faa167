"""The SPMD runtime (docs/runtime.md; layer 11 of docs/architecture.md): running a kernel graph on MPI ranks
(`launch`, `timed_run`, `executor`, `mpiexec`, `rank`; the driver's link to its ranks `rank_job`, `rank_link`,
`rank_server`), each rank's blocks (`blocks`), what the host can run
(`resources`), the run's timings (`timings`), the in-process simulator of every device (`simulator`), and the
MPI executor of redistribution plans (`plan_executor`, with `communicators`, `mpi_packing`, `shm_collectives`, and
the cost model's measurement run `calibration`).

`python -m slicer.runtime PROGRAM ...` is `slicer-run` (slicer.tools.slicer_run).
"""

from .launch import launch
from .simulator import Simulator, assemble, simulate
from .timings import StepTiming, Timings

__all__ = ["Simulator", "StepTiming", "Timings", "assemble", "launch", "simulate"]
