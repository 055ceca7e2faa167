"""Peak bytes per device of a priced tiling, counted as the kernel graph counts them (`KernelGraph.
live_bytes_per_node`): arguments from the start to their last use, results to the end, and otherwise only the values
that cross from one kernel to another; a value made and used inside one kernel lives in registers and scratch rows,
not in a stored block; a kernel holds all its inputs and outputs while it runs. Kernels end where a collective is (the
model's collectives) and, in long collective-free stretches, about every `CUT_OPS` compute ops (`lowering/cut.py` cuts
content-defined between 24 and 96 compute ops, about every 8 past 24); a gathered copy is held from the op that needs
it to the last that may read it (`value_uses.copy_reads`). Gradient buckets are formed as `spmd/bucketing.py` forms
them: the collectives that may join one, per kind and axes, in the order their inputs are made, each bucket filled up
to the bucket size while no member's result is read before its last member is made; a bucket packs its members after
the last is made, which is their last read, and its collective ends the kernel there; the reduced bucket is held to its
members' last use. A collective left alone stays before its reader, and ends the kernel there."""

from __future__ import annotations

import bisect
import functools
import itertools
import operator

from slicer.spmd.bucketing import greedy_buckets

CUT_OPS = 32


class MemoryTrace:
    """Where each value is born (op, kernel, bytes), which values are stored, and the transient copies."""

    def __init__(self, num_ops: int, bucket_bytes: int = 0):
        self.num_ops = num_ops
        self.bucket_bytes = bucket_bytes
        self.kernel = 0
        self.compute_ops = 0
        self.born: dict[int, tuple[int, int, int]] = {}
        self.stored: set[int] = set()
        self.transient = [0] * (num_ops + 2)
        # per (kind, axes), the collectives that may join a bucket, as `greedy_buckets` takes them:
        # (made at op, value, read at op, bytes, reduced bytes)
        self.members: dict[tuple, list[tuple[int, int, int, int, int]]] = {}
        self.held: list[tuple[int, int, int, int]] = []  # (op, its kernel, last op reading it, bytes)
        self.op_kernel = [0] * num_ops
        self.ends: dict[int, int] = {}  # value -> its last read, where earlier than its last reader (`read_until`)
        self.kernels = 1  # how many kernels, once `peak` has placed the buckets' collectives

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

    def bucket_member(self, key: tuple, value: int, index: int, nbytes: int, result: int, reader: int) -> None:
        """Value `value`, made at op `index`, of `nbytes` (`result` once reduced), is reduced by a collective of
        `key` (kind, axes) that may join a gradient bucket (`spmd/bucketing.py`); op `reader` reads the result."""
        self.members.setdefault(key, []).append((index, value, reader, nbytes, result))

    def buckets(self) -> list[tuple[int, int, int, tuple[int, ...], int]]:
        """The buckets as `spmd/bucketing.py` plans them (`greedy_buckets`: per kind and axes, members in the order
        they are made, each bucket filled while within `bucket_bytes` and no member is read before the last is made),
        each as (packed after op, bytes, reduced bytes, members, first reader): a bucket of one is not packed."""
        return [(max(m[0] for m in group), sum(m[3] for m in group), sum(m[4] for m in group),
                 tuple(m[1] for m in group), min(m[2] for m in group))
                for members in self.members.values() for group in greedy_buckets(members, self.bucket_bytes)]

    def resize(self, value: int, nbytes: int) -> None:
        """Value `value` is stored as `nbytes` per device (a fill, sized once its consumer's tiling is known)."""
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
        # is made; the reduced bucket is held from there to its members' last use. The bucket's collective ends the
        # kernel packing it, and a collective left alone the kernel before its reader: kernels renumbered with a cut
        # there.
        packed = [0] * (num_ops + 2)  # buckets packed after the same op are reduced one after the other
        reduced, read_at, cuts = [], {}, set()
        for index, nbytes, result, members, reader in self.buckets():
            if len(members) < 2:
                cuts.add(reader)
                continue
            if index < 0:
                continue
            cuts.add(index + 1)
            packed[index + 1] = max(packed[index + 1], nbytes)
            read_at.update(dict.fromkeys(members, index))
            reduced.append((index, max(last_use.get(v, index) for v in members), result))
        held = self.held
        if read_at:
            ends = {**ends, **read_at}
            last_reader = {**last_reader, **read_at}
        if cuts:
            after = functools.partial(bisect.bisect_right, sorted(cuts))
            op_kernel = [k + after(i) for i, k in enumerate(op_kernel)]
            all_born = {v: (i, k + after(i) if i >= 0 else k, b) for v, (i, k, b) in all_born.items()}
            held = [(i, k + after(i), end, b) for i, k, end, b in held]
        self.kernels = self.kernel + 1 + len(cuts)
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
        # The running sum of `diff` plus each position's copies, at C speed (a search asks this of every tiling
        # it prices: a Python loop over the positions was a tenth of the search's time).
        copies = map(operator.add, self.transient, packed)
        running = itertools.accumulate(diff[:self.num_ops + 2])
        return max(0, max(map(operator.add, running, copies), default=0))
