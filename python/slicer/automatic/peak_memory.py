"""Peak bytes per device of a priced layout, counted as the kernel graph counts them (`KernelGraph.
live_bytes_per_node`): arguments from the start to their last use, results to the end, and otherwise only the values
that cross from one kernel to another; a value made and used inside one kernel lives in registers and scratch rows,
not in a stored block; a kernel holds all its inputs and outputs while it runs. Kernels end where a collective is (the
model's collectives) and, in long collective-free stretches, about every `CUT_OPS` compute ops (`lowering/cut.py` cuts
content-defined between 24 and 96 compute ops, about every 8 past 24); a gathered copy is held from the op that needs
it to the last that may read it (`cost_model._copy_reads`). A gradient bucket (`spmd/bucketing.py`) packs its members
after the last is made, which is their last read, and its collective ends the kernel there; the reduced bucket is held
to its members' last use."""

from __future__ import annotations

import bisect
import functools
import itertools
import operator

CUT_OPS = 32


class MemoryTrace:
    """Where each value is born (op, kernel, bytes), which values are stored, and the transient copies."""

    def __init__(self, num_ops: int):
        self.num_ops = num_ops
        self.kernel = 0
        self.compute_ops = 0
        self.born: dict[int, tuple[int, int, int]] = {}
        self.stored: set[int] = set()
        self.transient = [0] * (num_ops + 2)
        # each gradient bucket: packed after op, its bytes, its reduced block's bytes, its members
        self.buckets: list[tuple[int, int, int, tuple[int, ...]]] = []
        self.held: list[tuple[int, int, int, int]] = []  # (op, its kernel, last op reading it, bytes)
        self.op_kernel = [0] * num_ops
        self.ends: dict[int, int] = {}  # value -> its last read, where earlier than its last reader (`read_until`)

    def arguments(self, sizes: list[int]) -> None:
        """The arguments 0, 1, ... hold `sizes` bytes from the start."""
        self.born.update((value, (-1, -1, nbytes)) for value, nbytes in enumerate(sizes))
        self.stored.update(range(len(sizes)))

    def boundary(self) -> None:
        """A collective: the kernel before it ends."""
        self.kernel += 1
        self.compute_ops = 0

    def produce(self, index: int, value: int, nbytes: int) -> None:
        self.born[value] = (index, self.kernel, nbytes)
        self.op_kernel[index] = self.kernel

    def new_bucket(self, member: int, index: int, nbytes: int, result: int) -> int:
        """A gradient bucket opened by value `member`, made at op `index`, of `nbytes` (its reduced block:
        `result` bytes); returns the bucket's number (`pack`)."""
        self.buckets.append((index, nbytes, result, (member,)))
        return len(self.buckets) - 1

    def pack(self, bucket: int, member: int, index: int, nbytes: int, result: int) -> None:
        """Value `member`, made at op `index`, of `nbytes` (`result` reduced), joins bucket `bucket`: the bucket
        packs its members side by side after its last is made and reduces them together (`spmd/bucketing.py`)."""
        last, total, reduced, members = self.buckets[bucket]
        self.buckets[bucket] = (max(last, index), total + nbytes, reduced + result, members + (member,))

    def resize(self, value: int, nbytes: int) -> None:
        """Value `value` is stored as `nbytes` per device (a fill, sized once its consumer's layout is known)."""
        index, kernel, _ = self.born[value]
        self.born[value] = (index, kernel, nbytes)

    def computed(self) -> None:
        self.compute_ops += 1
        if self.compute_ops >= CUT_OPS:
            self.boundary()

    def copy(self, index: int, nbytes: int) -> None:
        """A copy held while op `index` runs."""
        self.transient[index + 1] += nbytes

    def read_until(self, value: int, index: int) -> None:
        """`value` is last read at op `index` (its last reader reads a copy of it made before: -1, none)."""
        self.ends[value] = index

    def hold(self, index: int, last: int, nbytes: int) -> int:
        """A copy made for op `index` (a gathered block) and read again up to op `last`: stored from the start of
        the kernel of `index` to the end of the kernel of `last`. Returns the copy's number (`read_held`)."""
        self.held.append((index, self.kernel, last, nbytes))
        return len(self.held) - 1

    def read_held(self, copy: int, index: int) -> None:
        """Op `index` reads the held copy `copy` again: it is stored at least to the end of that op's kernel."""
        made, kernel, last, nbytes = self.held[copy]
        if index > last:
            self.held[copy] = (made, kernel, index, nbytes)

    def peak(self, last_use: dict[int, int], results, last_reader: dict[int, int]) -> int:
        """The most bytes held at once: a stored value from the start of the kernel that makes it to the end of
        the kernel that last reads it (a kernel holds all its inputs and outputs while it runs), transients at
        their op. Stored: the arguments, the results, and the values whose last reading op (`last_reader`) runs in
        a later kernel than the one making them."""
        all_born, ends, op_kernel, num_ops = self.born, self.ends, self.op_kernel, self.num_ops
        stored = self.stored | {v for v in results if v in all_born}
        # A bucket of several members: each member is last read where the bucket packs it, after its last member
        # is made; the reduced bucket is held from there to its members' last use (a bucket of one stays where
        # it is, its member read by its collective's consumer).
        packed = [0] * (num_ops + 2)  # buckets packed after the same op are reduced one after the other
        reduced, read_at = [], {}
        for index, nbytes, result, members in self.buckets:
            if len(members) < 2 or index < 0:
                continue
            packed[index + 1] = max(packed[index + 1], nbytes)
            read_at.update(dict.fromkeys(members, index))
            reduced.append((index, max(last_use.get(v, index) for v in members), result))
        held = self.held
        if read_at:
            ends = {**ends, **read_at}
            last_reader = {**last_reader, **read_at}
            # the bucket's collective ends the kernel packing it: kernels renumbered with a cut after each pack
            cuts = sorted({index + 1 for index, *_ in reduced})
            after = functools.partial(bisect.bisect_right, cuts)
            op_kernel = [k + after(i) for i, k in enumerate(op_kernel)]
            all_born = {v: (i, k + after(i) if i >= 0 else k, b) for v, (i, k, b) in all_born.items()}
            held = [(i, k + after(i), end, b) for i, k, end, b in held]
        for v, reader in last_reader.items():
            found = all_born.get(v)
            if found is not None and found[1] != op_kernel[reader]:
                stored.add(v)
        # Each kernel's first and last op: kernels are numbered in op order, each one run of ops.
        first, last, index = {}, {}, 0
        for kernel, run in itertools.groupby(op_kernel):
            first[kernel] = index
            index += len(list(run))
            last[kernel] = index - 1
        diff = [0] * (num_ops + 3)
        for v in stored:
            born, kernel, nbytes = all_born[v]
            read_early = ends.get(v)  # (`read_until`: -1, read only before the first op, so in no kernel)
            end = max(last_use.get(v, born) if read_early is None else read_early, born)
            if end < num_ops and (end >= 0 or read_early is None):
                end = last.get(op_kernel[end], end)
            if born >= 0:
                born = first.get(kernel, born)
            diff[born + 1] += nbytes
            diff[end + 2] -= nbytes
        for index, kernel, end, nbytes in held:
            end = last.get(op_kernel[min(end, num_ops - 1)], end) if end < num_ops else end
            diff[first.get(kernel, index) + 1] += nbytes
            diff[max(end, index) + 2] -= nbytes
        for index, end, nbytes in reduced:
            end = last.get(op_kernel[end], end) if end < num_ops else end
            diff[index + 2] += nbytes
            diff[max(end, index) + 2] -= nbytes
        # The running sum of `diff` plus each position's copies, at C speed (a search asks this of every layout
        # it prices: a Python loop over the positions was a tenth of the search's time).
        copies = map(operator.add, self.transient, packed)
        held = itertools.accumulate(diff[:self.num_ops + 2])
        return max(0, max(map(operator.add, held, copies), default=0))
