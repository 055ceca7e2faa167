"""Apply the propagation laws to a fixpoint, then report what could not be reconciled.

A deterministic worklist: scan the function's ops in pre-order, apply the
first law that rewrites the first op it can, and start over, until no law
applies. (The upstream greedy pattern driver cannot be used here: these
rewrites create loops and move ops across regions, which Python patterns would
have to do behind the driver's back.) Laws in priority order: dead code,
deforestation, backward (slices into producers), forward (ops into loops),
hoisting; then, when none applies, fusion of sibling loops.

Applying "the first law at the first op" does not mean scanning the function after each rewrite
(`_Worklist`): the ops to ask are queued in pre-order, and a rewrite queues again only the ops whose laws
may now answer differently, which it tells through a listener (`laws.RewriteListener`: the op it rewrites
and the anchor its new ops go before, the ops it erases and moves): its operands' producers and their
users, its results' users and the loops around both, the new and moved ops, and possible duplicates of new
slices and loops. Asking the queued op of least position first gives every rewrite in the same order as
asking every op each time (`propagate(..., incremental=False)`; `test/unit/propagation/test_worklist.py`
checks both give the same program), in time about linear in the program (docs/propagation.md, "Cost").
A propagation that exceeds `REWRITES_PER_OP` rewrites per op stops with `PropagationError` (a
`BudgetExceeded`) naming the laws that kept rewriting, with a reproducer.

Conflicts: a `slicer.slice` left at the fixpoint whose source is a tile loop
over the same mesh axes (another dim or another range) is a place where two
tactics disagree about one value. The earlier tactic won (forward propagation
follows tactics in order); the slice stays as a required redistribution, marked
`slicer.conflict`, for the partition pass to turn into collectives.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import Counter, deque
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import builtin

from slicer.core.errors import Located, PassFailure, PropagationError
from slicer.core.functions import defined_functions, function_name
from slicer.core.names import CONFLICT_ATTR, LOOP, SLICE
from slicer.core.operations import as_op, defining_op
from slicer.core.pipeline import run_pipeline
from slicer.core.reproducer import save_reproducer
from slicer.dialect import SliceOp, walk_ops

from .ir_utils import BlockOrder, ancestors, captured_values, enclosing_loops, op_id, walk_captured
from .laws import (
    LATE_LAWS,
    LAWS,
    MIXED,
    Journal,
    RewriteListener,
    duplicate_candidates,
    duplicate_slices,
    may_fuse,
    sibling_facts,
    sum_loop_of,
    tactic_name,
    tile_loop_of,
)

REWRITES_PER_OP = 64
"""The rewrite budget per op of the function (see `rewrite_budget`). Each op is pulled into at most one loop
per mesh axis, deforested, composed or hoisted a bounded number of times, so the laws need a constant number of
rewrites per op: at most 2.3 on the examples' strategies, the GPT decoders of `benchmarks/compile_scaling.py` and
the test suite's residual chains (measured when this budget was set); 64 leaves a wide margin and still stops a
runaway propagation within seconds."""
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
        worklist = _Worklist(function)
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
    return any(_ask(op, journal, laws) for op in walk_ops(function) if op != function)


def _ask(op: ir.Operation, journal: Journal, laws) -> bool:
    """Apply the first of `laws` that rewrites at `op` (noting its name for the budget error)."""
    for law in laws:
        if law(op, journal):
            journal.last_law = law.__name__
            return True
    return False


class _Entry:
    """A queued op; `live` turns False when the op is popped, erased or moved (the heap is lazy: dead entries
    stay in it and are skipped)."""

    __slots__ = ("op", "live")

    def __init__(self, op: ir.Operation):
        self.op, self.live = op, True


class _Worklist(RewriteListener):
    """The ops the laws must be asked about, in program order (see the module docstring).

    Every op of the function has a *key*, a float increasing in pre-order (`key`, and all keys sorted in
    `keys`). Ops to ask are queued in a heap by key; an op not queued is one no law applies to. Asking the
    queued op of least key first reproduces the reference exactly: every op before it is one no law applies
    to. A rewrite tells the listener what it erases and moves (`Journal.erase`, `Journal.move_before`) and where
    it puts new ops (right before its anchor): new ops are found from the uses the rewrite changed (the users
    of the rewritten op's results, walked back through ops without a key) and the moved ops, and get keys
    between the anchor's predecessor and the anchor. Then the ops whose laws may answer differently are
    queued again (`after`): the new and moved ops (of ops moved `settled`, a fused loop's bodies, only the
    loops and the slices that now have an identical one: `RewriteListener.moving`); the producers of what the
    rewritten op used (fewer uses: dead code, a single-use loop or slice) and their user when one is left; the
    users of its results (their operands changed) and the loops around those users and around the rewritten op
    (their bodies changed) with those loops' users (deforestation reads the body); and, for every slice and
    loop among them, the slices and loops that may now be its duplicates (through use lists:
    `laws.duplicate_candidates`).

    Ops are known by address (`op_id`; the bindings' hash changes with an op's operands). Erased ops are
    never touched again (their Python objects raise once invalidated): the listener drops them from every
    table before `erase` runs, and records their addresses for the rest of the step."""

    _RENUMBER_GAP = 1e-12  # relative to the keys (floats hold ~16 digits): below it, keys are renumbered

    def __init__(self, function: ir.Operation):
        self.function = function
        self.key: dict[int, float] = {}  # op_id -> key
        self.keys: list[float] = []
        self.op_at: dict[float, ir.Operation] = {}  # key -> op (for the late phase's loops, `_unsettled_loops`)
        self.loops: dict[int, ir.Operation] = {}  # op_id -> op, for every keyed loop
        self.sibling_facts: dict[int, tuple] = {}  # op_id -> `laws.sibling_facts` of a keyed loop (late phase)
        self.heap: list[tuple[float, int, _Entry]] = []
        self.queued: dict[int, _Entry] = {}  # op_id -> its live entry
        self.counter = 0
        self._step: dict | None = None
        # The late phase's memory (`rewrite_late`): every loop whose subtree ends before this key answered no to
        # the late laws, and nothing at or before its key changed since.
        self.late_settled_before = -math.inf
        self._renumber(queue_all=True)

    # -- keys and the queue ---------------------------------------------------------------------------

    def _renumber(self, *, queue_all: bool = False) -> None:
        """Keys 0, 1, 2, ... in pre-order for every op; queues every op (at the start) or keeps the queued
        ones and queues ops that had no key."""
        ops = [op for op in walk_ops(self.function) if op != self.function]
        ids = [op_id(op) for op in ops]
        queued = set(self.queued)
        had_key = self.key
        self.late_settled_before = -math.inf  # keys change: nothing is known settled
        self.key = {i: float(n) for n, i in enumerate(ids)}
        self.keys = list(self.key.values())
        self.op_at = dict(zip(self.keys, ops))
        self.loops = {i: op for op, i in zip(ops, ids) if op.name == LOOP}
        self.sibling_facts = {}
        for entry in self.queued.values():
            entry.live = False
        self.heap, self.queued = [], {}
        for op, i in zip(ops, ids):
            if queue_all or i in queued or i not in had_key:
                self.push(op)

    def push(self, op: ir.Operation) -> None:
        i = op_id(op)
        if i in self.queued:
            return
        entry = _Entry(op)
        self.queued[i] = entry
        self.counter += 1
        heapq.heappush(self.heap, (self.key[i], self.counter, entry))

    def known(self, op: ir.Operation) -> bool:
        return op_id(op) in self.key

    def _drop_tree(self, op: ir.Operation, erased: bool, settled: bool = False) -> None:
        """`op` and its nested ops lose their keys (erased, or moved to get new ones; `settled`: moved without
        being asked again, see `RewriteListener.moving`, so those queued are queued again once keyed)."""
        for inner in walk_ops(op):
            i = op_id(inner)
            entry = self.queued.pop(i, None)
            if entry is not None:
                entry.live = False
                if settled:
                    self._step["requeue"].append((inner, i))
            if settled:
                self._step["settled_ids"].add(i)
            key = self.key.pop(i, None)
            self.loops.pop(i, None)
            self.sibling_facts.pop(i, None)  # (a moved loop may change blocks)
            if key is not None:
                del self.op_at[key]
                del self.keys[bisect.bisect_left(self.keys, key)]
                self._changed_at(key)
            if erased and self._step is not None:
                self._step["erased"].add(i)

    # -- scanning -------------------------------------------------------------------------------------

    def rewrite_once(self, journal: Journal, laws) -> bool:
        """Apply the first law that rewrites the first op (pre-order) it can; False at the fixpoint."""
        while self.heap:
            _, _, entry = heapq.heappop(self.heap)
            if not entry.live:
                continue
            op = entry.op
            asked = op_id(op)
            del self.queued[asked]
            entry.live = False
            if _ask(op, journal, laws):
                self.after(asked=(op, asked))
                return True
        return False

    def rewrite_late(self, journal: Journal) -> bool:
        """The late laws (fusion), asked of every loop in pre-order once the others are at their fixpoint.

        A loop whose subtree ends before `late_settled_before` is not asked again: it answered no at an earlier
        walk, and the answer of a loop depends only on its block from the first loop it could fuse with to
        the end of its own subtree (`fusion.fuse_sibling_loops`: the values it reads, their users before it,
        the ops in between), where nothing changed since (every rewrite lowers the key to the first position
        it touched: `_changed_at`). Without it, each fusion made the late phase walk and ask every loop again
        (quadratic: most of a ZeRO training step's propagation time)."""
        settled = self.late_settled_before
        loops = self._unsettled_loops(settled)
        earliest = self._earliest_siblings() if loops else {}
        for op in loops:
            key = self.key.get(op_id(op))
            if key is not None and not self._has_earlier_sibling(op, key, earliest):
                continue  # the law would answer no (`_earliest_siblings`), as it would to the asking below
            self.late_settled_before = key if key is not None else -math.inf  # lowered by the rewrite's changes
            if _ask(op, journal, LATE_LAWS):
                self.after()
                return True
            self.late_settled_before = settled
        return False

    def _facts(self, i: int, op: ir.Operation) -> tuple:
        facts = self.sibling_facts.get(i)
        if facts is None:
            facts = self.sibling_facts[i] = sibling_facts(op)
        return facts

    def _earliest_siblings(self) -> dict[tuple, dict]:
        """For each `sibling_facts` key of the keyed loops: the least key (position) of a loop per result type.

        The late law fuses a loop with an earlier loop of its block only (`fuse_sibling_loops`), and only if
        both have the same range type, action and mesh, and results of one type. A loop with no such loop
        before it answers no whatever else holds: not asking it gives the same rewrites, and skips walking its
        body for the values it reads (a quarter of the late phase's asks on the GPT step over 2x4)."""
        earliest: dict[tuple, dict] = {}
        for i, op in self.loops.items():
            group, result_type = self._facts(i, op)
            if result_type == MIXED:
                continue
            found = earliest.setdefault(group, {})
            key = self.key[i]
            if key < found.get(result_type, math.inf):
                found[result_type] = key
        return earliest

    def _has_earlier_sibling(self, op: ir.Operation, key: float, earliest: dict[tuple, dict]) -> bool:
        facts = self._facts(op_id(op), op)
        group = facts[0]
        return any(first < key and may_fuse((group, result_type), facts)
                   for result_type, first in earliest.get(group, {}).items())

    def _unsettled_loops(self, settled: float) -> list[ir.Operation]:
        """The loops nested in the function whose subtree does not end before `settled`, in pre-order: the
        loops at or after `settled` and the loops around the first op there (a loop's subtree is the run of
        keys from its own to its last op's). Found from the keys (`loops`, `op_at`) rather than by walking the
        function, which visited every op outside the settled loops at each late step."""
        index = bisect.bisect_left(self.keys, settled)
        if index == len(self.keys):
            return []
        first = self.op_at[self.keys[index]]
        around = [a for a in reversed(_loops_around(first, self.function)) if a.name == LOOP]
        later = sorted((self.key[i], i) for i in self.loops if self.key[i] >= settled)
        return around + [self.loops[i] for _, i in later]

    def _changed_at(self, key: float) -> None:
        """A rewrite changed the program at `key` (an op erased, moved, made or given new operands there)."""
        if key < self.late_settled_before:
            self.late_settled_before = key

    # -- the listener -----------------------------------------------------------------------------------

    def before(self, op: ir.Operation, anchor: ir.Operation) -> None:
        """A law is about to rewrite at `op`: note what may change, and where new ops will go."""
        if not self.known(anchor):
            self._renumber()  # an op the table missed (never expected; keyed again rather than failing)
        hi = self.key[op_id(anchor)]
        index = bisect.bisect_left(self.keys, hi)
        lo = self.keys[index - 1] if index else hi - 1.0
        producers = [p for p in map(defining_op, captured_values(op)) if p is not None]
        users = [as_op(use.owner) for result in op.results for use in result.uses]
        for changed in [op, *users]:  # new ops go after `lo`; the rewritten op and its users change
            self._changed_at(self.key.get(op_id(changed), lo))
        self._changed_at(lo)
        # Ops are told apart by address: an erased op's Python object raises when touched, and the object a
        # walk gives for an op need not be the one a law holds.
        held = lambda ops: [(o, op_id(o)) for o in ops]  # noqa: E731
        self._step = {"op": held([op]), "anchor_block": anchor.block, "lo": lo, "hi": hi,
                      "producers": held(producers), "users": held(users),
                      "outer": held(_loops_around(op, self.function)), "moved": [], "erased": set(),
                      "settled": [], "settled_ids": set(), "requeue": []}

    def erasing(self, op: ir.Operation) -> None:
        self._drop_tree(op, erased=True)

    def moving(self, op: ir.Operation, settled: bool = False) -> None:
        self._drop_tree(op, erased=False, settled=settled)
        self._step["settled" if settled else "moved"].append((op, op_id(op)))

    def after(self, asked: tuple[ir.Operation, int] | None = None) -> None:
        """The rewrite is done: key the new and moved ops, queue what may now rewrite. `asked`: the op the laws
        were asked about (with its address), when the rewrite was elsewhere (a duplicate merged into it)."""
        step, self._step = self._step, None
        if step is None:
            return
        erased = step["erased"]
        alive = lambda held: [o for o, h in held if h not in erased]  # noqa: E731
        seeds = alive(step["users"]) + alive(step["moved"]) + alive(step["op"]) + alive([asked] if asked else [])
        settled = alive(step["settled"])
        fresh = self._key_new_ops(seeds + settled, step)
        # Ops moved `settled` are keyed again but asked again only by the laws merging duplicates: the slices and
        # loops among them (with their possible duplicates, below), and any that were queued already.
        settled_ids = step["settled_ids"]
        touched = [o for o in fresh if op_id(o) not in settled_ids] if settled_ids else list(fresh)
        # (a slice only if the block now has one like it: the bodies of a fusion hold hundreds of slices)
        touched += [o for o in settled if o.name == LOOP or (o.name == SLICE and duplicate_slices(o))]
        touched += [o for o, i in step["requeue"] if i not in erased]
        for producer in alive(step["producers"]):
            touched.append(producer)
            if producer.name in (SLICE, LOOP):
                # Its users' laws read how many uses it has only to ask whether it has one (a single-use loop
                # gives its body away, a single-use slice commutes: `may_take_body`, `order_slices`), so they are
                # asked again when it is left with one: re-asking all the users of a loop read by hundreds of ops
                # was 45% of the ops asked again on the GPT training step's FSDP-like layouts over 2x4.
                users = [as_op(use.owner) for result in producer.results for use in result.uses]
                if len(users) == 1:
                    touched += users
        around = {op_id(o): o for o in alive(step["outer"])}
        for user in seeds:
            touched.append(user)
            around.update((op_id(o), o) for o in _loops_around(user, self.function))
        for parent in {op_id(o.parent): o for o in settled}.values():  # the loops they joined
            around.update((op_id(o), o) for o in _loops_around(parent, self.function))
        for loop_op in around.values():  # each once: the seeds of a big rewrite share their loops
            touched.append(loop_op)
            users = [as_op(use.owner) for result in loop_op.results for use in result.uses]
            touched += users
            # A consumer of a device's own block may now see an inner tiling (blockwise.own_block_tiling).
            touched += [as_op(use.owner) for user in users if user.name == SLICE
                        for result in user.results for use in result.uses]
        # A new slice of a partial sum may let its whole readers read its blocks (`reduce_shared_blocks`).
        touched += [as_op(use.owner) for o in fresh if o.name == SLICE and sum_loop_of(SliceOp(o).source) is not None
                    for use in SliceOp(o).source.uses]
        for op in {op_id(o): o for o in touched}.values():
            if self.known(op):
                self.push(op)
                if op.name in (SLICE, LOOP):
                    for candidate in duplicate_candidates(op):
                        if self.known(candidate):
                            self.push(candidate)

    def _key_new_ops(self, seeds: list[ir.Operation], step: dict) -> list[ir.Operation]:
        """Give keys to the ops the rewrite made or moved (found back from `seeds` through ops without a
        key); returns them, nested ops included, in pre-order."""
        tops: dict[int, ir.Operation] = {}
        stack = list(seeds)
        seen: set[int] = set()
        settled = step["settled_ids"]  # moved `settled`: without a key, but reading nothing new
        while stack:
            op = stack.pop()
            i = op_id(op)
            if i in seen:
                continue
            seen.add(i)
            if i in self.key:  # a known op's operands may be new (a user of the rewritten op)
                stack += [p for p in map(defining_op, op.operands) if p is not None and not self.known(p)]
                continue
            top = op
            while True:
                parent = top.parent
                if parent is None or as_op(parent) == self.function or self.known(as_op(parent)):
                    break
                top = as_op(parent)
            tops.setdefault(op_id(top), top)
            if i not in settled:
                stack += self._new_producers(op, settled)  # a new op's body may use new ops
        tops = list(tops.values())
        if not tops:
            return []
        if any(top.block != step["anchor_block"] for top in tops):
            self._renumber()  # not where laws put new ops: key everything again (correct, rarely needed)
            return [op for op in walk_ops(self.function) if op_id(op) in self.queued]
        tops.sort(key=BlockOrder)
        fresh = [inner for top in tops for inner in walk_ops(top)]
        lo, hi = step["lo"], step["hi"]
        gap = (hi - lo) / (len(fresh) + 1)
        if gap < self._RENUMBER_GAP * max(1.0, abs(hi)):
            self._renumber()
            return [op for op in walk_ops(self.function) if op_id(op) in self.queued]
        for n, op in enumerate(fresh, start=1):
            key, i = lo + gap * n, op_id(op)
            self.key[i] = key
            self.op_at[key] = op
            if op.name == LOOP:
                self.loops[i] = op
            bisect.insort(self.keys, key)
        return fresh

    def _new_producers(self, op: ir.Operation, settled: set[int]) -> list[ir.Operation]:
        """The ops without a key producing what `op` (itself without one) reads: its operands and the values its
        regions use from outside it (`walk_captured`, without listing the values of ops with a key, which are
        most of them, nor entering the ops moved `settled`: a fused loop's bodies)."""
        key, found = self.key, [p for p in map(defining_op, op.operands) if p is not None and not self.known(p)]
        if not len(op.regions):
            return found

        def take(value: ir.Value, owner_id) -> bool:
            if not isinstance(value, ir.BlockArgument) and owner_id not in key:  # (a block argument: no producer)
                found.append(as_op(value.owner))
            return False

        walk_captured(op, take, settled)
        return found


def _loops_around(op: ir.Operation, function: ir.Operation) -> list[ir.Operation]:
    return [a for a in ancestors(op) if a != function and a.name != builtin.ModuleOp.OPERATION_NAME]





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
