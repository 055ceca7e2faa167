"""SPMD partitioning support (DESIGN.md section 2, step 4; docs/partition.md).

The pass itself is `slicer.passes.partition` (`slicer-partition`); this package holds what it and its users
need: distributed types of SSA values (`dist_types`), argument layout inference (`infer`), plan emission as
collective ops (`emit`), the in-process SPMD simulator (`simulator`), the collectives report (`report`) and the
test oracle (`check`).

    from slicer.spmd import partition, compare, SpmdProgram, report
"""

from .check import Comparison, compare, partition, random_inputs
from .report import Report, report
from .simulator import SimulationError, SpmdProgram, simulate

__all__ = ["partition", "compare", "Comparison", "random_inputs", "SpmdProgram", "simulate", "SimulationError",
           "report", "Report"]
