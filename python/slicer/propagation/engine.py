"""Apply the propagation laws to a fixpoint, then report what could not be reconciled.

A deterministic worklist: scan the function's ops in pre-order, apply the
first law that rewrites the first op it can, and start over, until no law
applies. (The upstream greedy pattern driver cannot be used here: these
rewrites create loops and move ops across regions, which Python patterns would
have to do behind the driver's back.) Laws in priority order: dead code,
deforestation, backward (slices into producers), forward (ops into loops),
hoisting; then, when none applies, fusion of sibling loops.

Starting over does not mean asking every op again (`_Worklist`): an op no law
applied to stays *inert* until a rewrite may have changed what the laws see at
it, and a subtree of inert ops is skipped whole. Each law announces its rewrite
(`Journal.rewriting(op)`) before changing anything; what a rewrite at `op` can
change is local (see `_Worklist.before` and `after`): `op` and its operands'
producers and results' users, the ops of its block and of its users' blocks
(slices and loops compare themselves with their earlier siblings), its enclosing
loops (whose bodies changed) and their users. The scan order, hence every
rewrite and the result, is exactly the one of asking every op each time
(`propagate(..., incremental=False)`; `test/unit/propagate/test_worklist.py`
checks both give the same program). On a transformer block this asks 20x fewer
ops than starting over from scratch.

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
from slicer.core.names import CONFLICT_ATTR, LOOP, SLICE
from slicer.core.pipeline import run_pipeline
from slicer.dialect import SliceOp, walk_ops

from .ir_utils import ancestors, as_op, captured_values, defining_op, enclosing_loops
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


def propagate_module(module: ir.Operation, *, strict_conflicts: bool = False, incremental: bool = True) -> list[Conflict]:
    """Propagate the loops of every function of `module` in place; returns the conflicts.

    Without `strict_conflicts` a conflict is resolved (the earlier tactic wins) and stays visible as the
    `slicer.conflict` attribute on the redistribution point; with it, conflicts are located errors. An op
    without a rule reached by a tiled value is a located error (`PassFailure`). `incremental=False` asks every
    op of the function at every step (the same result, slower: the reference for the worklist)."""
    for _ in range(MAX_ROUNDS):
        rewrites, conflicts = 0, []
        for func in defined_functions(module):
            try:
                journal, found = propagate(func, incremental=incremental)
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


def propagate(function: ir.Operation, *, incremental: bool = True) -> tuple[Journal, list[Conflict]]:
    """Propagate the loops of `function` (a func.func) in place. `incremental=False` asks every op at every
    step (the reference the worklist is tested against)."""
    journal = Journal()
    if incremental:
        worklist = _Worklist(function)
        journal.on_rewrite = worklist.before
        step = lambda: worklist.rewrite_once(journal, LAWS) or worklist.rewrite_late(journal)  # noqa: E731
    else:
        step = lambda: _rewrite_once(function, journal, LAWS) or _rewrite_once(function, journal, LATE_LAWS)  # noqa: E731
    while step():
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


class _Worklist:
    """Which ops the laws need to be asked about again (see the module docstring).

    `inert`: ops no law applies to, as long as nothing they depend on changes; `clean`: ops whose whole
    subtree is inert. Slices and loops also compare themselves with their earlier siblings (duplicates), so
    theirs is recorded with the *generation* of their block, which every rewrite that adds or changes an op
    of the block bumps (instead of forgetting each op of the block). Ops are compared by identity in the IR,
    so an op must leave both tables before it is erased (its memory may be reused by an op created later):
    `before` removes every op a rewrite may erase (the op itself, its subtree, the slices producing its
    operands)."""

    SIBLING_LAWS_OPS = (SLICE, LOOP)

    def __init__(self, function: ir.Operation):
        self.function = function
        self.inert: dict[ir.Operation, int | None] = {}
        self.clean: dict[ir.Operation, int | None] = {}
        self.generation: dict[ir.Block, int] = {}
        # The ops of each block as last listed (iterating a block through the bindings costs ~2 us per op);
        # dropped for every block a rewrite may add ops to or erase ops from (see `before`).
        self.ops_of: dict[ir.Block, list[ir.Operation]] = {}
        self._pending: tuple | None = None

    # -- scanning ---------------------------------------------------------------------------------------

    def rewrite_once(self, journal: Journal, laws) -> bool:
        """Apply the first law that rewrites the first op (pre-order) it can; False at the fixpoint."""
        return any(self._visit(block, journal, laws) for block in self.function.regions[0].blocks)

    def rewrite_late(self, journal: Journal) -> bool:
        """The late laws (fusion), asked of every op once the others are at their fixpoint. They move whole
        loop bodies: afterwards every op is asked again."""
        self._pending = None
        journal.on_rewrite = None
        try:
            rewrote = _rewrite_once(self.function, journal, LATE_LAWS)
        finally:
            journal.on_rewrite = self.before
        if rewrote:
            self.inert.clear()
            self.clean.clear()
            self.ops_of.clear()
        return rewrote

    def _visit(self, block: ir.Block, journal: Journal, laws) -> bool:
        generation = self.generation.get(block, 0)
        ops = self.ops_of.get(block)
        if ops is None:
            ops = self.ops_of[block] = [op.operation for op in block.operations]
        for op in ops:
            stamp = self.clean.get(op, _MISSING)
            if stamp is None or stamp == generation:
                continue
            stamp = self.inert.get(op, _MISSING)
            if stamp is _MISSING or (stamp is not None and stamp != generation):
                for law in laws:
                    if law(op, journal):
                        self.after()
                        return True
                stamp = generation if op.name in self.SIBLING_LAWS_OPS else None
                self.inert[op] = stamp
            if any(self._visit(inner, journal, laws) for region in op.regions for inner in region.blocks):
                return True
            self.clean[op] = stamp
        return False

    # -- what a rewrite may change --------------------------------------------------------------------

    def _unclean_ancestors(self, op) -> None:
        parent = op.parent
        while parent is not None:
            parent = as_op(parent)
            if parent == self.function:
                break
            self.clean.pop(parent, None)
            parent = parent.parent

    def forget(self, op: ir.Operation) -> None:
        """Ask the laws about `op` again (and look into its enclosing ops again)."""
        self.inert.pop(op, None)
        self.clean.pop(op, None)
        self._unclean_ancestors(op)

    def forget_tree(self, op: ir.Operation) -> None:
        for inner in walk_ops(op):
            self.inert.pop(inner, None)
            self.clean.pop(inner, None)
            for region in inner.regions:
                for block in region.blocks:
                    self.ops_of.pop(block, None)
        self._unclean_ancestors(op)

    def touch_block(self, block: ir.Block) -> None:
        """An op of `block` was added or changed: its slices and loops compare themselves with it again."""
        self.generation[block] = self.generation.get(block, 0) + 1
        owner = block.owner
        if owner is not None and as_op(owner) != self.function:
            self.clean.pop(as_op(owner), None)
            self._unclean_ancestors(as_op(owner))

    def before(self, op: ir.Operation) -> None:
        """A law is about to rewrite at `op`: forget what the rewrite may erase or change, remember where."""
        self.forget_tree(op)
        self.ops_of.pop(op.block, None)  # new ops go before `op`, which may be erased
        for producer in {p for p in map(defining_op, captured_values(op)) if p is not None}:
            self.forget(producer)  # fewer uses (dead code, a single-use slice); a producing slice may be erased
            self.ops_of.pop(producer.block, None)
            if producer.name == SLICE:
                for use in producer.results[0].uses:
                    self.forget(as_op(use.owner))  # another user of a slice that may now have a single use
        blocks = [op.block]
        for result in op.results:
            for use in result.uses:
                user = as_op(use.owner)
                self.forget(user)  # its operand will change
                blocks.append(user.block)  # ... so it may now equal an earlier or later sibling
                blocks += [outer.block for outer in ancestors(user)
                           if outer != self.function and outer.name != "builtin.module"]  # bodies that change
        outer = [a for a in ancestors(op) if a != self.function and a.name != "builtin.module"]
        for enclosing in outer:
            self.ops_of.pop(enclosing.block, None)  # a hoisted op moves into its loop's block
        self._pending = (blocks, outer)

    def after(self) -> None:
        """The rewrite is done: new ops stand in the rewritten op's block (a hoisted op in its loop's), and
        its enclosing loops' bodies changed."""
        if self._pending is None:
            return
        blocks, outer = self._pending
        self._pending = None
        for enclosing in outer:
            self.forget(enclosing)
            blocks.append(enclosing.block)  # its body changed: it may now equal a sibling
            for result in enclosing.results:
                for use in result.uses:
                    self.forget(as_op(use.owner))  # slices of a loop whose body changed (deforestation)
        for block in blocks:
            self.touch_block(block)


_MISSING = object()


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
