"""SPMD partitioning (docs/partition.md; layer 7 of docs/architecture.md).

`partition` turns a loop program into SPMD functions on local tensors with explicit collectives (the pass
`slicer-partition` calls it); `dist_types` are the distributed types of SSA values, `infer` the distributed type of
unannotated arguments, `emit` writes a redistribution plan as collective ops, `report` says what an SPMD
program communicates and why.

    from slicer.spmd import partition_module, report
"""

from .partitioner import partition_module
from .report import Report, report

__all__ = ["partition_module", "report", "Report"]
