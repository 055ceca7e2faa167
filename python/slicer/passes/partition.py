"""`slicer-partition`: loop programs -> SPMD functions on local tensors with explicit collectives
(`slicer.spmd.partitioner`, docs/partition.md)."""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from slicer.core.passes import ModulePass, register_pass
from slicer.spmd import partition_module


@register_pass
@dataclass(frozen=True)
class SlicerPartition(ModulePass):
    name = "slicer-partition"
    description = "Partition slicer loop programs into SPMD functions on local tensors with explicit collectives"

    mesh: str = ""
    """The `slicer.mesh` to partition over (default: the only one in the module)."""
    entry: str = ""
    """Partition only this function (default: every function with a body)."""

    def apply(self, module: ir.Operation) -> None:
        partition_module(module, mesh=self.mesh, entry=self.entry)
