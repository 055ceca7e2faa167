"""`slicer-propagate`: push partitioning loops through the program with the rule table
(`slicer.propagation`, docs/propagation.md).

Conflicts are resolved (the earlier tactic wins, the point is marked `slicer.conflict`) or, with
`strict-conflicts`, reported as errors. With `check-each-step`, the program before and after is run
through the JIT on random inputs and compared; a mismatch is an error naming the step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mlir import ir

import slicer
from slicer.core.errors import Located, PassFailure, StepMismatch
from slicer.core.passes import ModulePass, register_pass
from slicer.propagation import propagate_module

if TYPE_CHECKING:  # slicer.checking (the JIT) is loaded when a check is asked for: `slicer.checking` below
    import slicer.checking


@register_pass
@dataclass(frozen=True)
class SlicerPropagate(ModulePass):
    name = "slicer-propagate"
    description = "Propagate slicer loops through the program with rules derived from linalg indexing maps"

    strict_conflicts: bool = False
    check_each_step: bool = False

    def apply(self, module: ir.Operation) -> None:
        before = str(module) if self.check_each_step else None
        propagate_module(module, strict_conflicts=self.strict_conflicts)
        if before is not None:
            try:
                slicer.checking.check_equivalent(before, str(module), step="slicer-propagate")
            except StepMismatch as exc:
                raise PassFailure(Located(module.location, str(exc))) from None
