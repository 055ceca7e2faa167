"""`slicer-verify`: the dialect's semantic verifier as a pass (run by default on input)."""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from slicer.dialect.verifier import verify

from .base import Located, ModulePass, PassFailure


@dataclass(frozen=True)
class SlicerVerify(ModulePass):
    name = "slicer-verify"
    description = "Check what IRDL cannot: mesh axes exist, block shapes match range sizes, dims exist, no axis twice"

    def apply(self, module: ir.Operation) -> None:
        errors = verify(module)
        if errors:
            raise PassFailure([Located(e.location, e.message) for e in errors])
