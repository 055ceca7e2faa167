"""Which loops the late laws (fusion of sibling loops) must still be asked about, once the other laws are at
their fixpoint (`worklist.Worklist.rewrite_late`).

A loop whose subtree ends before `settled_before` answered no at an earlier walk, and nothing from the first loop
it could fuse with to the end of its subtree changed since (every rewrite lowers `settled_before` to the first
position it touched); a loop with no earlier loop of its kind in its block cannot fuse at all. Neither is asked
again: without this each fusion made the late phase walk and ask every loop again (quadratic).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator

from mlir import ir

from slicer.core.names import LOOP

from .ir_utils import loops_around, op_id
from .laws import MIXED, may_fuse, sibling_facts


class LateScan:
    """The late phase's memory over one worklist's positions (`positions`: its `key`, `keys`, `op_at`, `loops`
    and `function`)."""

    def __init__(self, positions):
        self.positions = positions
        self.settled_before = -math.inf
        self.sibling_facts: dict[int, tuple] = {}  # op_id -> `laws.sibling_facts` of a keyed loop

    def reset(self) -> None:
        """The positions were renumbered: nothing is known settled."""
        self.settled_before = -math.inf
        self.sibling_facts = {}

    def forget(self, i: int) -> None:
        """The op of address `i` was erased or moved (a moved loop may change blocks)."""
        self.sibling_facts.pop(i, None)

    def changed_at(self, key: float) -> None:
        """A rewrite changed the program at `key` (an op erased, moved, made or given new operands there)."""
        if key < self.settled_before:
            self.settled_before = key

    def candidates(self) -> Iterator[tuple[ir.Operation, float | None]]:
        """The loops to ask in pre-order, with their keys: not settled, and with an earlier sibling to fuse with
        (the law would answer no to the others, as it would to the asking)."""
        loops = self._unsettled_loops(self.settled_before)
        earliest = self._earliest_siblings() if loops else {}
        for op in loops:
            key = self.positions.key.get(op_id(op))
            if key is not None and not self._has_earlier_sibling(op, key, earliest):
                continue
            yield op, key

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
        body for the values it reads."""
        earliest: dict[tuple, dict] = {}
        for i, op in self.positions.loops.items():
            group, result_type = self._facts(i, op)
            if result_type == MIXED:
                continue
            found = earliest.setdefault(group, {})
            key = self.positions.key[i]
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
        index = bisect.bisect_left(self.positions.keys, settled)
        if index == len(self.positions.keys):
            return []
        first = self.positions.op_at[self.positions.keys[index]]
        around = [a for a in reversed(loops_around(first, self.positions.function)) if a.name == LOOP]
        later = sorted((self.positions.key[i], i) for i in self.positions.loops if self.positions.key[i] >= settled)
        return around + [self.positions.loops[i] for _, i in later]
