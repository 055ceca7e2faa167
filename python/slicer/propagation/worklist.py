"""The propagation engine's worklist: which ops the laws must be asked about, in program order.

Applying "the first law at the first op" does not mean scanning the function after each rewrite: the ops to ask
are queued in pre-order, and a rewrite queues again only the ops whose laws may now answer differently, which it
tells through a listener (`laws.RewriteListener`). Asking the queued op of least position first gives every
rewrite in the same order as asking every op each time (`engine.propagate(..., incremental=False)`;
`test/unit/propagation/test_worklist.py` checks both give the same program), in time about linear in the program
(docs/propagation.md, "Cost").
"""

from __future__ import annotations

import bisect
import heapq
import math

from mlir import ir

from slicer.core.names import LOOP, SLICE
from slicer.core.operations import as_op, defining_op
from slicer.dialect import SliceOp, walk_ops

from .ir_utils import BlockOrder, captured_values, loops_around, op_id, walk_captured
from .late_scan import LateScan
from .laws import LATE_LAWS, Journal, RewriteListener, duplicate_candidates, duplicate_slices, sum_loop_of


def ask_laws(op: ir.Operation, journal: Journal, laws) -> bool:
    """Apply the first of `laws` that rewrites at `op` (noting its name for the budget error)."""
    for law in laws:
        if law(op, journal):
            journal.last_law = law.__name__
            return True
    return False


class _Queued:
    """A queued op; `live` turns False when the op is popped, erased or moved (the heap is lazy: dead entries
    stay in it and are skipped)."""

    __slots__ = ("op", "live")

    def __init__(self, op: ir.Operation):
        self.op, self.live = op, True


class Worklist(RewriteListener):
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
        self.op_at: dict[float, ir.Operation] = {}  # key -> op (for the late phase's loops, `LateScan`)
        self.loops: dict[int, ir.Operation] = {}  # op_id -> op, for every keyed loop
        self.heap: list[tuple[float, int, _Queued]] = []
        self.queued: dict[int, _Queued] = {}  # op_id -> its live entry
        self.counter = 0
        self._step: dict | None = None
        self.late = LateScan(self)  # the late phase's memory (`rewrite_late`)
        self._renumber(queue_all=True)

    # -- keys and the queue ---------------------------------------------------------------------------

    def _renumber(self, *, queue_all: bool = False) -> None:
        """Keys 0, 1, 2, ... in pre-order for every op; queues every op (at the start) or keeps the queued
        ones and queues ops that had no key."""
        ops = [op for op in walk_ops(self.function) if op != self.function]
        ids = [op_id(op) for op in ops]
        queued = set(self.queued)
        had_key = self.key
        self.late.reset()  # keys change: nothing is known settled
        self.key = {i: float(n) for n, i in enumerate(ids)}
        self.keys = list(self.key.values())
        self.op_at = dict(zip(self.keys, ops))
        self.loops = {i: op for op, i in zip(ops, ids) if op.name == LOOP}
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
        entry = _Queued(op)
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
            self.late.forget(i)
            if key is not None:
                del self.op_at[key]
                del self.keys[bisect.bisect_left(self.keys, key)]
                self.late.changed_at(key)
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
            if ask_laws(op, journal, laws):
                self.after(asked=(op, asked))
                return True
        return False

    def rewrite_late(self, journal: Journal) -> bool:
        """The late laws (fusion), asked of every loop in pre-order once the others are at their fixpoint, but
        for the loops `LateScan` knows would answer no."""
        settled = self.late.settled_before
        for op, key in self.late.candidates():
            self.late.settled_before = key if key is not None else -math.inf  # lowered by the rewrite's changes
            if ask_laws(op, journal, LATE_LAWS):
                self.after()
                return True
            self.late.settled_before = settled
        return False

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
            self.late.changed_at(self.key.get(op_id(changed), lo))
        self.late.changed_at(lo)
        # Ops are told apart by address: an erased op's Python object raises when touched, and the object a
        # walk gives for an op need not be the one a law holds.
        held = lambda ops: [(o, op_id(o)) for o in ops]  # noqa: E731
        self._step = {"op": held([op]), "anchor_block": anchor.block, "lo": lo, "hi": hi,
                      "producers": held(producers), "users": held(users),
                      "outer": held(loops_around(op, self.function)), "moved": [], "erased": set(),
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
                # was 45% of the ops asked again on the GPT training step's FSDP-like strategies over 2x4.
                users = [as_op(use.owner) for result in producer.results for use in result.uses]
                if len(users) == 1:
                    touched += users
        around = {op_id(o): o for o in alive(step["outer"])}
        for user in seeds:
            touched.append(user)
            around.update((op_id(o), o) for o in loops_around(user, self.function))
        for parent in {op_id(o.parent): o for o in settled}.values():  # the loops they joined
            around.update((op_id(o), o) for o in loops_around(parent, self.function))
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
