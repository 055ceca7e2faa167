"""`slicer-propagate`: push partitioning loops through the program with the rule table.

Runs the laws of slicer.propagation to a fixpoint in every function, then
reports conflicts (as remarks, or errors with `strict-conflicts`). With
`check-each-step`, the program before and after is run through the JIT on
random inputs and compared; a mismatch is an error naming the step.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from slicer.checking import StepMismatch, check_equivalent
from slicer.propagation.engine import propagate
from slicer.propagation.laws import UnsupportedOp

from .pipeline import run_pipeline

from .base import Located, ModulePass, PassFailure


@dataclass(frozen=True)
class SlicerPropagate(ModulePass):
    name = "slicer-propagate"
    description = "Propagate slicer loops through the program with rules derived from linalg indexing maps"

    strict_conflicts: bool = False
    check_each_step: bool = False

    def apply(self, module: ir.Operation) -> None:
        before = str(module) if self.check_each_step else None
        errors = []
        for op in module.regions[0].blocks[0].operations:
            op = op.operation
            if op.name != "func.func" or not len(op.regions[0].blocks):
                continue
            try:
                _, conflicts = propagate(op)
            except UnsupportedOp as exc:
                raise PassFailure(Located(exc.op.location, str(exc))) from None
            # Without strict-conflicts a conflict is resolved (earlier tactic wins) and stays
            # visible as the `slicer.conflict` attribute on the redistribution point.
            if self.strict_conflicts:
                errors.extend(Located(c.op.location, c.message) for c in conflicts)
        if errors:
            raise PassFailure(errors)
        # Deforestation copies producers into each consumer; merged slices make the copies
        # identical, and upstream CSE keeps one.
        run_pipeline(module, "cse")
        if before is not None:
            try:
                check_equivalent(before, str(module), step="slicer-propagate")
            except StepMismatch as exc:
                raise PassFailure(Located(module.location, str(exc))) from None
