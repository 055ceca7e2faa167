"""`explain(module)`: for each op, the loops that partition it and the rule that put each loop there."""

from __future__ import annotations

from mlir import ir
from mlir.dialects import builtin, func

from slicer.core.names import (
    BLOCKED_ATTR,
    CONFLICT_ATTR,
    DIALECT_PREFIX,
    LOOP,
    RULE_ATTR,
    SYM_NAME_ATTR,
    TACTIC_ATTR,
    YIELD,
)
from slicer.core.operations import as_op
from slicer.dialect import LoopOp, walk_ops

from .ir_utils import enclosing_loops


def _describe_loop(loop: LoopOp) -> str:
    attrs = loop.operation.attributes
    tactic = ir.StringAttr(attrs[TACTIC_ATTR]).value if TACTIC_ATTR in attrs else "no tactic"
    rule = ir.StringAttr(attrs[RULE_ATTR]).value if RULE_ATTR in attrs else "tactic"
    return f"{loop.action} over {','.join(loop.range.axes)} [{tactic}; {rule}]"


_NOT_SHOWN = (builtin.ModuleOp.OPERATION_NAME, YIELD, func.ReturnOp.OPERATION_NAME)


def explain(module) -> str:
    """For each op, which loops partition it and which rule put each loop there."""
    op = as_op(module)
    lines = []
    for inner in walk_ops(op):
        if inner.name in _NOT_SHOWN or inner.name.startswith(DIALECT_PREFIX) and inner.name != LOOP:
            continue
        if inner.name == func.FuncOp.OPERATION_NAME:
            lines.append(f"@{ir.StringAttr(inner.attributes[SYM_NAME_ATTR]).value}:")
            continue
        if inner.name == LOOP or inner.parent is None or inner.parent.name not in (func.FuncOp.OPERATION_NAME, LOOP):
            continue  # loops are shown on the ops they partition; scalar bodies are not ops of the program
        loops = list(reversed(enclosing_loops(inner)))
        where = " / ".join(_describe_loop(loop) for loop in loops) if loops else "replicated (no loop)"
        conflict = (
            f"  !! {ir.StringAttr(inner.attributes[CONFLICT_ATTR]).value}" if CONFLICT_ATTR in inner.attributes else ""
        )
        if BLOCKED_ATTR in inner.attributes:
            conflict += f"  !! {ir.StringAttr(inner.attributes[BLOCKED_ATTR]).value}"
        lines.append(f"  {inner.name:<24} {where}{conflict}")
    return "\n".join(lines)
