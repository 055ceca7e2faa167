"""`slicer-bucket-collectives`: all_reduces of the same kind combined into buckets started as soon as their last
input exists (`slicer.spmd.bucketing`, docs/runtime.md, "Overlap")."""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from slicer.core.passes import ModulePass, register_pass
from slicer.spmd.bucketing import bucket_all_reduces


@register_pass
@dataclass(frozen=True)
class SlicerBucketCollectives(ModulePass):
    name = "slicer-bucket-collectives"
    description = "Combine all_reduces over the same axes into buckets (one collective each) started early"

    bucket_bytes: int = 0
    """Bytes per bucket at most; 0: the cost model's size (`slicer.spmd.bucketing.bucket_bytes`)."""

    def apply(self, module: ir.Operation) -> None:
        bucket_all_reduces(module, cap=self.bucket_bytes)
