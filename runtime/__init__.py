"""The SPMD runtime (docs/runtime.md; layer 13 of docs/architecture.md), in five subpackages, top to bottom:
`jobs` (launching ranks and driving them: a run, warm ranks, a training session, the job already running),
`state` (a session's state on its ranks: checkpoints, live resharding) and `simulation` (every device in one
process, the partitioning oracle), `execution` (one rank running its kernel graph, its blocks and timings),
and `collectives` (the MPI and shared-memory executor of redistribution plans, the cost model's calibration).

`python -m slicer.runtime PROGRAM ...` is `slicer-run` (slicer.tools.slicer_run).
"""

from .execution.executor import RunOptions
from .execution.timings import StepTiming, Timings
from .jobs.launch import launch, launch_each
from .simulation.simulator import Simulator, assemble, simulate

__all__ = ["RunOptions", "Simulator", "StepTiming", "Timings", "assemble", "launch", "launch_each", "simulate"]
