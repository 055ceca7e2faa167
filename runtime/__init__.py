"""The SPMD runtime (docs/runtime.md; layer 9 of docs/architecture.md): running a kernel graph on MPI ranks
(`launch`, `job`, `executor`, `mpiexec`, `rank`), each rank's blocks (`blocks`), what the host can run
(`resources`), the run's timings (`timings`), and the in-process simulator of every device (`simulator`).

`python -m slicer.runtime PROGRAM ...` is `slicer-run` (slicer.tools.slicer_run).
"""

from .launch import launch
from .simulator import SpmdProgram, assemble, simulate
from .timings import StepTiming, Timings

__all__ = ["SpmdProgram", "StepTiming", "Timings", "assemble", "launch", "simulate"]
