"""`slicer-kernel-checked-asserts`: a failed `cf.assert` records its number for the caller to raise, instead of
aborting the process (`slicer.lowering.asserts`)."""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from slicer.core.passes import ModulePass, register_pass

from ..asserts import checked_asserts


@register_pass
@dataclass(frozen=True)
class SlicerKernelCheckedAsserts(ModulePass):
    name = "slicer-kernel-checked-asserts"
    description = ("Replace every cf.assert by recording its number in a module global, read by "
                   "__slicer_failed_assert(); the messages go to the module attribute slicer.assert_messages")

    def apply(self, module: ir.Operation) -> None:
        checked_asserts(module.opview)
