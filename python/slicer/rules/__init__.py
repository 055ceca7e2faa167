"""Propagation rules as data, derived from linalg indexing maps (docs/propagation.md; layer 4 of
docs/architecture.md).

`rule_for(op)` gives the `OpRule` of an op: for linalg ops it is derived from the
indexing maps, iterator types and body (`from_linalg.py`), so a new linalg op
needs no new code (tables its body reads by index, as embeddings do, are operands
too: `gathers.py`); a few non-linalg ops have small explicit entries
(`explicit.py`). `OpRule.tile(operand=k | result=r, dim=j)` answers "this dim is
tiled: which loop, which action, which operands are sliced, or why not"
(`table.py`). Pure analysis: nothing here rewrites IR.
"""

from __future__ import annotations

from mlir import ir

from slicer.core.errors import NoRule
from slicer.core.linalg_facts import PARALLEL, REDUCTION, is_linalg_op

from .combiner import is_max_reduction
from .explicit import explicit_rule, kept_dims
from .from_linalg import linalg_rule
from .gathers import gathered_tables, rule_operands
from .linearity import constant_term_inputs, linear_at, linear_in
from .table import DimUse, OpRule, RuleOutcome


def rule_for(op: ir.Operation | ir.OpView) -> OpRule:
    """The rule of `op`; raises NoRule naming the op and where to add an entry."""
    op = op.operation
    with op.context:
        if is_linalg_op(op):
            return linalg_rule(op)
        rule = explicit_rule(op)
    if rule is None:
        raise NoRule(f"no propagation rule for '{op.name}': it is not a linalg op and has no entry in "
                     "slicer.rules.explicit (add one there)")
    return rule


__all__ = ["DimUse", "NoRule", "OpRule", "PARALLEL", "REDUCTION", "RuleOutcome", "constant_term_inputs",
           "gathered_tables", "is_max_reduction", "kept_dims", "linear_at", "linear_in", "rule_for", "rule_operands"]
