"""Apply the propagation laws to a fixpoint, then report what could not be reconciled.

A deterministic worklist: scan the function's ops in pre-order, apply the
first law that rewrites the first op it can, and start over, until no law
applies. (The upstream greedy pattern driver cannot be used here: these
rewrites create loops and move ops across regions, which Python patterns would
have to do behind the driver's back.) Laws in priority order: dead code,
deforestation, backward (slices into producers), forward (ops into loops),
hoisting; then, when none applies, fusion of sibling loops.

Conflicts: a `slicer.slice` left at the fixpoint whose source is a tile loop
over the same mesh axes (another dim or another range) is a place where two
tactics disagree about one value. The earlier tactic won (forward propagation
follows tactics in order); the slice stays as a required redistribution, marked
`slicer.conflict`, for the partition pass to turn into collectives.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from slicer.core.errors import Located, PassFailure
from slicer.core.functions import defined_functions
from slicer.core.names import CONFLICT_ATTR, SLICE
from slicer.core.pipeline import run_pipeline
from slicer.dialect import SliceOp, walk_ops

from .ir_utils import as_op, enclosing_loops
from .laws import LATE_LAWS, LAWS, Journal, UnsupportedOp, tactic_name, tile_loop_of

MAX_REWRITES = 100_000
MAX_ROUNDS = 8  # fixpoint + CSE rounds (the rounds after the first only merge copies CSE made identical)


class PropagationError(RuntimeError):
    """Propagation did not converge (a bug: the laws should always terminate)."""


@dataclass(frozen=True)
class Conflict:
    """Two tactics asking incompatible things of one value."""

    op: ir.Operation  # the slice that stays as a redistribution
    winner: str
    loser: str
    message: str


def propagate_module(module: ir.Operation, *, strict_conflicts: bool = False) -> list[Conflict]:
    """Propagate the loops of every function of `module` in place; returns the conflicts.

    Without `strict_conflicts` a conflict is resolved (the earlier tactic wins) and stays visible as the
    `slicer.conflict` attribute on the redistribution point; with it, conflicts are located errors. An op
    without a rule reached by a tiled value is a located error (`PassFailure`)."""
    for _ in range(MAX_ROUNDS):
        rewrites, conflicts = 0, []
        for func in defined_functions(module):
            try:
                journal, found = propagate(func)
            except UnsupportedOp as exc:
                raise PassFailure(Located(exc.op.location, str(exc))) from None
            rewrites += journal.rewrites
            conflicts += found
        # Deforestation copies producers into each consumer; merged slices make the copies identical, and
        # upstream CSE keeps one. Loops holding such copies become equivalent only then, so the laws run
        # again (merging them) until a round rewrites nothing.
        run_pipeline(module, "cse")
        if rewrites == 0:
            break
    if strict_conflicts and conflicts:
        raise PassFailure([Located(c.op.location, c.message) for c in conflicts])
    return conflicts


def propagate(function: ir.Operation) -> tuple[Journal, list[Conflict]]:
    """Propagate the loops of `function` (a func.func) in place."""
    journal = Journal()
    while _rewrite_once(function, journal, LAWS) or _rewrite_once(function, journal, LATE_LAWS):
        journal.rewrites += 1
        if journal.rewrites > MAX_REWRITES:
            raise PropagationError(f"propagation did not converge after {MAX_REWRITES} rewrites")
    return journal, find_conflicts(function)


def _rewrite_once(function: ir.Operation, journal: Journal, laws) -> bool:
    for op in walk_ops(function):
        if op == function:
            continue
        for law in laws:
            if law(op, journal):
                return True
    return False


def find_conflicts(function: ir.Operation) -> list[Conflict]:
    """Places where a value tiled over some axes is needed, inside a loop over those axes, in
    another layout: sliced on another dim (or by another range), or used whole."""
    conflicts = []
    for op in walk_ops(function):
        if op == function:
            continue
        busy = enclosing_loops(op)
        for index, value in enumerate(op.operands):
            found = tile_loop_of(value)
            if found is None:
                continue
            producer, _ = found
            axes = set(producer.range.axes)
            if op.name == SLICE:
                view = SliceOp(op)
                if view.range is None or not axes & set(view.range.axes):
                    continue
                need = f"dim {view.dim} tiled over {', '.join(view.range.axes)}"
                user = next((as_op(u.owner) for u in view.result.uses), None)
            else:
                if not any(axes & set(l.range.axes) for l in busy if l.range is not None):
                    continue
                need = f"the whole value (operand #{index})"
                user = op
            winner_loop = next((l for l in busy if l.range is not None and axes & set(l.range.axes)), None)
            winner = tactic_name(winner_loop) if winner_loop is not None else "an enclosing loop"
            at = f" at '{user.name}'" if user is not None else ""
            message = (
                f"conflicting tactics{at}: {tactic_name(producer)} tiles this value's dim {producer.action.dim} over "
                f"{', '.join(producer.range.axes)}, but {winner} needs {need}; the earlier tactic wins and the value "
                "is redistributed here"
            )
            op.attributes[CONFLICT_ATTR] = ir.StringAttr.get(message)
            conflicts.append(Conflict(op, winner, tactic_name(producer), message))
    return conflicts
