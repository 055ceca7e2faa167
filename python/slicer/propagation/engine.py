"""Apply the propagation laws to a fixpoint, then report what could not be reconciled.

A deterministic worklist (`worklist.py`): scan the function's ops in pre-order, apply the first law that rewrites
the first op it can, and start over, until no law applies. (The upstream greedy pattern driver cannot be used
here: these rewrites create loops and move ops across regions, which Python patterns would have to do behind the
driver's back.) A propagation that exceeds `REWRITES_PER_OP` rewrites per op stops with `PropagationError`
naming the laws that kept rewriting, with a reproducer.

Conflicts: a `slicer.slice` left at the fixpoint whose source is a tile loop over the same mesh axes (another dim
or another range) is a place where two tactics disagree about one value. The earlier tactic won; the slice stays
as a required redistribution, marked `slicer.conflict`, for the partition pass to turn into collectives.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass

from mlir import ir

from slicer.core.errors import Located, PassFailure, PropagationError
from slicer.core.functions import defined_functions, function_name
from slicer.core.names import CONFLICT_ATTR, SLICE
from slicer.core.operations import as_op
from slicer.core.pipeline import run_pipeline
from slicer.core.reproducer import save_reproducer
from slicer.dialect import SliceOp, walk_ops

from .ir_utils import enclosing_loops
from .laws import LATE_LAWS, LAWS, Journal, tactic_name, tile_loop_of
from .worklist import Worklist, ask_laws

REWRITES_PER_OP = 64
"""The rewrite budget per op of the function (see `rewrite_budget`). Each op is pulled into at most one loop
per mesh axis, deforested, composed or hoisted a bounded number of times, so the laws need a constant number of
rewrites per op (a few, measured on the examples' strategies and the GPT decoders of
`benchmarks/compile_scaling.py`); 64 leaves a wide margin and still stops a runaway propagation early."""
MAX_ROUNDS = 8  # fixpoint + CSE rounds (the rounds after the first only merge copies CSE made identical)
_RECENT = 1000  # rewrites the budget error looks back at to name the law that kept rewriting


REPRODUCER_PIPELINE = "builtin.module(slicer-propagate)"
"""The pipeline the budget error's reproducer runs on the saved input."""
CSE_PIPELINE = "cse"
"""Run between rounds: merges the copies deforestation made identical (see `propagate_module`)."""


def rewrite_budget(function: ir.Operation, per_op: int = REWRITES_PER_OP) -> int:
    """How many rewrites propagating `function` may take: proportional to its number of ops."""
    return per_op * (sum(1 for _ in walk_ops(function)) + 16)


@dataclass(frozen=True)
class Conflict:
    """Two tactics asking incompatible things of one value."""

    op: ir.Operation  # the slice that stays as a redistribution
    winner: str
    loser: str
    message: str


def propagate_module(module: ir.Operation, *, strict_conflicts: bool = False, incremental: bool = True,
                     rewrites_per_op: int = REWRITES_PER_OP) -> list[Conflict]:
    """Propagate the loops of every function of `module` in place; returns the conflicts.

    Without `strict_conflicts` a conflict is resolved (the earlier tactic wins) and stays visible as the
    `slicer.conflict` attribute on the redistribution point; with it, conflicts are located errors. An op
    without a rule reached by a tiled value is a located error (`PassFailure`). `incremental=False` asks every
    op of the function at every step (the same result, slower: the reference for the worklist). A function
    that takes more than `rewrites_per_op` rewrites per op raises `PropagationError` (a `BudgetExceeded`)
    naming the law that kept rewriting, with a reproducer of this call's input."""
    original = module.get_asm(enable_debug_info=True)
    for _ in range(MAX_ROUNDS):
        rewrites, conflicts = 0, []
        for func in defined_functions(module):
            try:
                journal, found = propagate(func, incremental=incremental, rewrites_per_op=rewrites_per_op)
            except PropagationError as exc:
                raise PropagationError(f"{exc} Reproduce: {save_reproducer(original, REPRODUCER_PIPELINE)}"
                                       " (please report it: this is a bug in Slicer)") from None
            rewrites += journal.rewrites
            conflicts += found
        # Deforestation copies producers into each consumer; merged slices make the copies identical, and
        # upstream CSE keeps one. Loops holding such copies become equivalent only then, so the laws run
        # again (merging them) until a round rewrites nothing.
        run_pipeline(module, CSE_PIPELINE)
        if rewrites == 0:
            break
    if strict_conflicts and conflicts:
        raise PassFailure([Located(c.op.location, c.message) for c in conflicts])
    return conflicts


def propagate(function: ir.Operation, *, incremental: bool = True,
              rewrites_per_op: int = REWRITES_PER_OP) -> tuple[Journal, list[Conflict]]:
    """Propagate the loops of `function` (a func.func) in place. `incremental=False` asks every op at every
    step (the reference the worklist is tested against)."""
    journal = Journal()
    budget = rewrite_budget(function, rewrites_per_op)
    recent: deque[str] = deque(maxlen=_RECENT)
    if incremental:
        worklist = Worklist(function)
        journal.listener = worklist
        step = lambda: worklist.rewrite_once(journal, LAWS) or worklist.rewrite_late(journal)  # noqa: E731
    else:
        step = lambda: _rewrite_once(function, journal, LAWS) or _rewrite_once(function, journal, LATE_LAWS)  # noqa: E731
    while step():
        journal.rewrites += 1
        recent.append(journal.last_law)
        if journal.rewrites > budget:
            laws = ", ".join(f"'{law}' {count} times" for law, count in Counter(recent).most_common(3))
            raise PropagationError(
                f"internal error: propagation of @{function_name(function)} did not converge within its budget of "
                f"{budget} rewrites ({rewrites_per_op} per op); the last {len(recent)} rewrites were by {laws}: "
                "laws that keep rewriting (a cycle), or rewrites growing faster than the program.")
    return journal, find_conflicts(function)


def _rewrite_once(function: ir.Operation, journal: Journal, laws) -> bool:
    return any(ask_laws(op, journal, laws) for op in walk_ops(function) if op != function)


def find_conflicts(function: ir.Operation) -> list[Conflict]:
    """Places where a value tiled over some axes is needed, inside a loop over those axes, in
    another distributed type: sliced on another dim (or by another range), or used whole."""
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
                if producer.action.dim == view.dim and producer.range_arg.type == view.range_value.type:
                    continue  # the consumer's own block of a shared loop (loops.take_body): no redistribution
                need = f"dim {view.dim} tiled over {', '.join(view.range.axes)}"
                user = next((as_op(u.owner) for u in view.result.uses), None)
            else:
                if not any(axes & set(loop.range.axes) for loop in busy if loop.range is not None):
                    continue
                need = f"the whole value (operand #{index})"
                user = op
            winner_loop = next((loop for loop in busy if loop.range is not None and axes & set(loop.range.axes)), None)
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
