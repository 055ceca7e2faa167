"""Ops moved across the collectives of the kernel graph where that holds fewer bytes between kernels.

The kernel graph cuts the SPMD function at its collectives in program order (`graph_builder.py`): an op before a
collective it does not feed runs in the kernel before it, its result held across it. Program order is not chosen
for memory: ring attention's backward (`frontends/decomp_ring.py`) made the next step's weights before the key
gradients' permutes, and [c, c] blocks of scores crossed them per device where none needs to.

Past a run of adjacent point-to-point transfers (`Collective.point_to_point`: the ring's permutes): the ops before
it that none of them needs, from last to first, each with the producers that feed only it (its closure), move after
the run when the bytes the closure's results pass across it exceed the bytes of what the closure reads that would
newly be held across it; only where every transfer of the run sends what the kernel right before it makes (one
sending a value made earlier overlaps that kernel, `runtime.execution.executor.schedule`). Re-materialised ops
(views, constants, fills) cost nothing and are seen through. Before such a run, the other way: an op after it that
reads nothing it brings moves before it when that holds fewer bytes across it (the query gradient's `dscores @ k`
after the key gradients' permutes). The new order is kept only if the most bytes held at once between kernels
(`planned_peak`) is not more than before. Other collectives keep their place: ops moved past ZeRO-3's
reduce_scatters took their overlap with the next kernel (issue 50).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable

from mlir import ir
from mlir.dialects import func

from slicer.core.operations import as_op, walk_ops

from .cut import cut

Predicate = Callable[[ir.Operation], bool]


def tensor_bytes(value: ir.Value) -> int:
    """The bytes of a value of static tensor type (0 for other values)."""
    if not isinstance(value.type, ir.RankedTensorType):
        return 0
    t = ir.RankedTensorType(value.type)
    if not t.has_static_shape:
        return 0
    width = t.element_type.width if hasattr(t.element_type, "width") else 64
    return math.prod(t.shape) * max(width, 8) // 8


class _Sinker:
    def __init__(self, ops: list, is_collective: Predicate, transfer: Predicate, remat: Predicate,
                 from_source: Predicate):
        self.ops = list(ops)
        self.is_collective, self.transfer, self.remat, self.from_source = is_collective, transfer, remat, from_source
        self.top = {op: op for op in self.ops}
        self.read: dict = {}
        self.uses: dict = {}
        self.remat = functools.cache(remat)

    def top_level(self, op: ir.Operation) -> ir.Operation | None:
        """The op of `ops` that `op` is or is nested in (None: the function's return)."""
        while op not in self.top:
            parent = op.parent
            if parent is None or not isinstance(as_op(parent), ir.Operation):
                return None
            op = as_op(parent)
            if op.name == func.FuncOp.OPERATION_NAME:
                return None
        return op

    def readers(self, op: ir.Operation) -> list:
        """The top-level ops reading `op`'s results, through views (None: the return)."""
        return [user for result in op.results for user in self._readers_of(result)]

    def producers(self, op: ir.Operation) -> list:
        """The values `op` (and its body) reads from outside it, through views and widenings to their sources."""
        if op in self.read:
            return self.read[op]
        values = []
        for deep in walk_ops(op):
            for operand in deep.operands:
                owner = operand.owner
                top = self.top_level(as_op(owner.owner) if isinstance(owner, ir.Block) else as_op(owner))
                if top is None or top != op:
                    values.append(operand)
        found = []
        while values:
            value = values.pop()
            owner = None if isinstance(value.owner, ir.Block) else as_op(value.owner)
            if owner is not None and self.remat(owner):
                if self.from_source(owner):
                    values += [o for o in owner.operands]
                continue  # a constant, an empty tensor, a fill, the device index: made again where read
            found.append(value)
        self.read[op] = found
        return found

    def run(self) -> list:
        index = 0
        while index < len(self.ops):
            if not self.is_collective(self.ops[index]):
                index += 1
                continue
            end = index
            while end + 1 < len(self.ops) and self.is_collective(self.ops[end + 1]):
                end += 1
            start = max((i for i in range(index) if self.is_collective(self.ops[i])), default=-1) + 1
            transfers = all(self.transfer(op) for op in self.ops[index:end + 1])
            moved = self.cut(start, index, end) if transfers else 0  # other collectives keep their overlap
            index = end + 1 - moved  # past the run, whose ops moved past it are now after it
        for first, last in reversed(self.runs()):  # last first: what moves before a run may move before the one
            if all(self.transfer(op) for op in self.ops[first:last + 1]):  # before it too
                self.hoist(first, last)
        return self.ops

    def runs(self) -> list[tuple[int, int]]:
        """(first, last) index of each run of adjacent collectives, in order."""
        found: list[tuple[int, int]] = []
        for i, op in enumerate(self.ops):
            if self.is_collective(op):
                found[-1:] = [(found[-1][0], i)] if found and found[-1][1] == i - 1 else found[-1:] + [(i, i)]
        return found

    def hoist(self, first: int, last: int) -> int:
        """Move ops of the segment after the transfers `ops[first:last + 1]` before them where they read
        nothing made after them and hold fewer bytes across them there (module docstring); how many moved."""
        end = next((i for i in range(last + 1, len(self.ops)) if self.is_collective(self.ops[i])), len(self.ops))
        segment = self.ops[last + 1:end]
        before = set(self.ops[:first])
        hoisted: set = set()
        for op in segment:
            if self.remat(op) or not op.results:
                continue
            owners = [None if isinstance(v.owner, ir.Block) else self.top_level(as_op(v.owner))
                      for v in self.producers(op)]
            if any(o is not None and o not in before and o not in hoisted for o in owners):
                continue  # reads what a transfer brings, or what is made after it
            moving = hoisted | {op}
            gain = sum(tensor_bytes(v) for v, o in zip(self.producers(op), owners)
                       if all(r in before or r in moving for r in self._readers_of(v)))
            cost = 0
            for result in op.results:
                later = [r for r in self._readers_of(result) if r not in moving]
                if later and not isinstance(result.type, ir.RankedTensorType):
                    cost = gain + 1  # a scalar cannot cross
                    break
                cost += tensor_bytes(result) if later else 0
            if gain > cost:
                hoisted.add(op)
        if hoisted:
            self.ops[first:end] = ([op for op in segment if op in hoisted] + self.ops[first:last + 1]
                                   + [op for op in segment if op not in hoisted])
        return len(hoisted)

    def cut(self, start: int, first: int, last: int) -> int:
        """Move ops of `ops[start:first]` past the collectives `ops[first:last + 1]` (module docstring); how
        many moved."""
        segment = self.ops[start:first]
        if not all(self.made_in(collective, set(segment)) for collective in self.ops[first:last + 1]):
            return 0  # a collective that may start a kernel early: its place is kept
        needed = self.cone(segment, self.ops[first:last + 1])
        after = set(self.ops[last + 1:]) | {None}
        inside, moved = set(segment), set[ir.Operation]()
        for op in reversed(segment):
            if op in needed or op in moved or self.remat(op) or not all(r in after or r in moved
                                                                       for r in self.readers(op)):
                continue
            later = after | moved
            groups = (self.closure(op, needed, later, inside), {op})
            saved, group = max(((self.saving(g, later), g) for g in groups), key=lambda pair: pair[0])
            if saved > 0:
                moved |= group
        for op in segment:  # views of what moves move with it (a kernel makes a view from its source)
            if op not in moved and self.remat(op) and any(
                    not isinstance(v.owner, ir.Block) and self.top_level(as_op(v.owner)) in moved
                    for v in op.operands):
                moved.add(op)
        if moved:
            kept = [op for op in segment if op not in moved]
            self.ops[start:last + 1] = kept + self.ops[first:last + 1] + [op for op in segment if op in moved]
        return len(moved)

    def made_in(self, collective: ir.Operation, segment: set) -> bool:
        """Whether what `collective` sends is made in `segment` (through views)."""
        return all(not isinstance(v.owner, ir.Block) and self.top_level(as_op(v.owner)) in segment
                   for v in self.producers(collective))

    def cone(self, segment: list, collectives: list) -> set:
        """The ops of `segment` the collectives read, directly or not."""
        inside, needed, stack = set(segment), set(), list(collectives)
        while stack:
            for value in self.producers(stack.pop()):
                owner = None if isinstance(value.owner, ir.Block) else self.top_level(as_op(value.owner))
                if owner in inside and owner not in needed:
                    needed.add(owner)
                    stack.append(owner)
        return needed

    def closure(self, op: ir.Operation, needed: set, after: set, segment: set) -> set:
        """`op` and the producers in `segment` that feed only it and each other, none that a collective needs."""
        group, stack = {op}, [op]
        while stack:
            for value in self.producers(stack.pop()):
                owner = None if isinstance(value.owner, ir.Block) else self.top_level(as_op(value.owner))
                if (owner in segment and owner not in group and owner not in needed and not self.remat(owner)
                        and all(r in group or r in after for r in self.readers(owner))):
                    group.add(owner)
                    stack.append(owner)
        return group

    def saving(self, group: set, after: set) -> int:
        """The bytes no longer held across the cut if `group` moves past it, less the bytes newly held; -1 when the
        group reads a value that is not a tensor from outside it (it could not cross)."""
        gain = sum(tensor_bytes(r) for op in group for r in op.results
                   if any(u not in group for u in self._readers_of(r)))
        cost = 0
        for value in {v for op in group for v in self.producers(op)}:
            owner = None if isinstance(value.owner, ir.Block) else self.top_level(as_op(value.owner))
            if owner in group:
                continue
            if not isinstance(value.type, ir.RankedTensorType):
                return -1
            if not any(u in after and u not in group for u in self._readers_of(value)):
                cost += tensor_bytes(value)
        return gain - cost

    def _readers_of(self, value: ir.Value) -> list:
        """The top-level ops reading `value`, through views (None: the return); the IR does not change here."""
        if value in self.uses:
            return self.uses[value]
        found = []
        for use in value.uses:
            user = self.top_level(as_op(use.owner))
            if user is not None and self.remat(user) and self.from_source(user):
                found += self.readers(user)
            else:
                found.append(user)
        self.uses[value] = found
        return found


def planned_peak(sinker: _Sinker, ops: list) -> int:
    """The most bytes held at once between kernels with `ops` in this order, counted as the kernel graph counts
    them (`KernelGraph.live_bytes_per_node`: a value from the node making it to its last reader; one node per
    collective and per kernel, long segments cut as `cut.py` cuts them)."""
    node: dict[ir.Operation, int] = {}
    segment: list = []
    count = 0
    for op in ops + [None]:
        if op is None or sinker.is_collective(op):
            for kernel in cut(segment) if segment else []:
                node.update((o, count) for o in kernel)
                count += 1
            segment = []
            if op is not None:
                node[op] = count
                count += 1
        else:
            segment.append(op)
    change = [0] * (count + 2)  # bytes starting to be held at each node, less those no longer held
    for op in ops:
        if sinker.remat(op):
            continue
        for result in op.results:
            readers = [count if r is None else node.get(r, count) for r in sinker._readers_of(result)]
            last = max(readers, default=node[op])
            if last > node[op] or sinker.is_collective(op):
                size = tensor_bytes(result)
                change[node[op]] += size
                change[last + 1] -= size
    return max(itertools.accumulate(change))


def sink_past_collectives(ops: list, is_collective: Predicate, transfer: Predicate, remat: Predicate,
                          from_source: Predicate) -> list:
    """`ops` (a function's top-level ops, its return excluded) with ops moved past the collectives they do not
    feed, and before the point-to-point `transfer`s whose blocks they do not read, where that holds fewer bytes
    across them (module docstring). `remat`: ops made again by every kernel reading them; `from_source`: those
    of them made from their operand (views, widenings)."""
    sinker = _Sinker(ops, is_collective, transfer, remat, from_source)
    moved = sinker.run()
    if moved == list(ops):
        return moved
    return moved if planned_peak(sinker, moved) <= planned_peak(sinker, list(ops)) else list(ops)


__all__ = ["sink_past_collectives", "tensor_bytes"]
