"""`slicer-verify`: the dialect's semantic verifier as a pass (slicer-opt runs it on every input)."""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from slicer.core.errors import Located, PassFailure
from slicer.core.passes import ModulePass, register_pass
from slicer.dialect.verifier import verify


@register_pass
@dataclass(frozen=True)
class SlicerVerify(ModulePass):
    name = "slicer-verify"
    description = "Check what IRDL cannot: mesh axes exist, block shapes match range sizes, dims exist, no axis twice"

    def apply(self, module: ir.Operation) -> None:
        errors = verify(module)
        if errors:
            raise PassFailure([Located(e.location, e.message) for e in errors])
