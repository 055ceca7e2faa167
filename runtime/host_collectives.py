"""Collectives over a group of ranks on several hosts with several of its ranks on each: in two levels, shared
memory within each host and MPI across the hosts.

An all_reduce of ``n`` elements over ``H`` hosts with ``L`` members each: every member copies its block into
shared memory; member ``l`` of a host combines chunk ``l`` (``n / L`` elements) of its host's blocks; the ``L``
members with the same local index all_reduce their chunks across the hosts over MPI (``L`` concurrent
all_reduces, each between ``H`` ranks, one per host); each writes its result chunk back into shared memory and
every member copies all ``L`` chunks out. A byte crosses between two hosts at most once per receiving host,
and the rounds within a host cost one copy in and one out, not MPI's rounds (`shm_collectives`).

Why by hand: MPICH (5.0) has node-aware algorithms (``MPIR_CVAR_IALLREDUCE_INTRA_ALGORITHM=sched_smp``, the
blocking collectives' ch4 "compositions"), but its default selection for the nonblocking calls the runtime
issues (``src/mpi/coll/coll_selection.json``: recursive doubling, reduce-scatter + all-gather) is flat over the
whole group, and its node-aware variants move the data within a host over its own shared memory, whose rounds
each need every member scheduled: the cost `shm_collectives` removes when ranks outnumber cores.

Sums are combined in the accumulation type (`dtypes.accumulation_dtype`: f32 for bf16 and f16) through both
levels and rounded once, as the flat path does; their order differs from the flat collective's (host by host),
so a float sum equals it up to rounding (exactly when every partial sum is exact, as for small integers), and a
maximum equals it exactly. Every member gets the same bits.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from slicer.core import dtypes
from slicer.redistribution.steps import REDUCTIONS, AllReduce

from . import shm_collectives
from .collective_kinds import mpi_type, typed_rows
from .shm_collectives import ARRIVE, ARRIVE2, DONE

# The states of one all_reduce on a member: its block published, its chunk's MPI all_reduce in flight, its
# result chunk published, done.
_PUBLISHED, _ACROSS, _GATHERING, _DONE = range(4)


def _mpi():
    from mpi4py import MPI
    return MPI


class HostAllReduce:
    """The two-level all_reduce of one step on this rank (`plan_executor.StepRunner` owns it): `local` is the
    communicator of the group's members on this host, `across` that of the members with this rank's local index
    on every host (ordered by group index). ``start`` publishes the block, ``test`` advances without blocking,
    ``finish`` completes into ``out``."""

    def __init__(self, program, local, across, *, spins: int):
        self.p, self.local, self.across = program, local, across
        dtype = program.dtype
        self.wide = np.dtype(dtypes.accumulation_dtype(dtype))
        self.how = REDUCTIONS[program.step.reduction]
        self.n = int(np.prod(program.in_shape, dtype=np.int64))
        k, me = local.Get_size(), local.Get_rank()
        c = max(1, -(-self.n // k))
        self.lo, self.hi = min(me * c, self.n), min((me + 1) * c, self.n)
        self.c = c
        self.nbytes = self.n * dtype.itemsize
        self.slot = shm_collectives.Slot(local, self.nbytes, c * dtype.itemsize, spins=spins)
        self.segment = self.slot.segments[0]
        self.chunk = np.empty(self.hi - self.lo, self.wide)  # this host's partial chunk, then the group's
        self.total = np.empty_like(self.chunk)
        MPI = _mpi()
        self.mpi_type = mpi_type(self.wide)
        self.mpi_op = MPI.LOR if dtype == np.bool_ else {"sum": MPI.SUM, "max": MPI.MAX}[program.step.reduction]
        self.state = _DONE
        self.request: Any = None  # the MPI all_reduce across the hosts, while in flight (an MPI.Request)

    def start(self, block: np.ndarray) -> None:
        """Copy this member's block into its region and publish it."""
        self.segment = seg = self.slot.next()
        seg.epoch += 1
        if seg.epoch > 1:  # every member is done reading this segment's previous use
            seg.wait(DONE, seg.epoch - 1)
        np.copyto(seg.mine[:self.nbytes].view(self.p.dtype), block.reshape(-1))
        seg.publish(ARRIVE, seg.epoch)
        self.state = _PUBLISHED

    def _combine_and_send(self) -> None:
        """Combine chunk l of this host's blocks and start its all_reduce across the hosts."""
        seg = self.segment
        rows = typed_rows(seg.data[:, :self.nbytes], self.p.dtype)[:, self.lo:self.hi]
        self.how.reduce(rows, axis=0, dtype=self.wide, out=self.chunk)
        self.request = self.across.Iallreduce([self.chunk, self.mpi_type], [self.total, self.mpi_type],
                                              op=self.mpi_op)
        self.state = _ACROSS

    def _publish_result(self) -> None:
        seg = self.segment
        np.copyto(seg.mine2[:(self.hi - self.lo) * self.p.dtype.itemsize].view(self.p.dtype), self.total,
                  casting="unsafe")  # narrowing back from the accumulation type: the one rounding
        seg.publish(ARRIVE2, seg.epoch)
        self.state = _GATHERING

    def test(self) -> bool:
        """Advance as far as possible without blocking; True once every member's result chunk is there."""
        seg = self.segment
        if self.state == _PUBLISHED and seg.ready(ARRIVE, seg.epoch):
            self._combine_and_send()
        if self.state == _ACROSS and self.request.Test():
            self._publish_result()
        return self.state == _GATHERING and seg.ready(ARRIVE2, seg.epoch)

    def finish(self, out: np.ndarray) -> None:
        """Complete the all_reduce into `out` and say this member is done reading the segment."""
        seg = self.segment
        if self.state == _PUBLISHED:
            seg.wait(ARRIVE, seg.epoch)
            self._combine_and_send()
        if self.state == _ACROSS:
            self.request.Wait()
            self._publish_result()
        seg.wait(ARRIVE2, seg.epoch)
        rows = typed_rows(seg.data2[:, :self.c * self.p.dtype.itemsize], self.p.dtype)
        flat, n, c = out.reshape(-1), self.n, self.c
        full = n // c
        if full:
            np.copyto(flat[:full * c].reshape(full, c), rows[:full])
        if n > full * c:
            np.copyto(flat[full * c:], rows[full, :n - full * c])
        seg.publish(DONE, seg.epoch)
        self.state = _DONE

    def free(self) -> None:
        """Free the shared memory and the two communicators (collective over the group)."""
        self.slot.free()
        self.local.Free()
        self.across.Free()


#: step class -> its form in two levels (the kinds that have one).
TWO_LEVELS: dict[type, type] = {AllReduce: HostAllReduce}


def form(step) -> type | None:
    """The class of the step's form in two levels, None if its kind has none."""
    return TWO_LEVELS.get(type(step))
