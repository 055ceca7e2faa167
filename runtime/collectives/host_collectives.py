"""Collectives over a group of ranks on several hosts with several of its ranks on each, in two levels: shared
memory within each host, MPI across the hosts. The all_reduce and the all_gather (`TWO_LEVELS`).

All_reduce: every member publishes its block in shared memory; member ``l`` of a host combines chunk ``l`` of
its host's blocks; the members with local index ``l`` all_reduce that chunk across the hosts over MPI; each
publishes its result chunk and every member copies all chunks out. All_gather: a member's block goes across the
hosts to the members with its local index, which publish what they received; every member copies the group's
blocks out: a block crosses to each other host once, not once per member there.

Why by hand: MPICH (5.0) has node-aware algorithms (``sched_smp``, the blocking ch4 "compositions"), but its
default selection for the nonblocking calls the runtime issues is flat over the group, and its node-aware
variants move data within a host through MPI's own rounds (see `shm_collectives` for their cost). Sums stay in
the accumulation type through both levels and round once; their order is host by host, so a float sum equals
the flat one to rounding, exactly on exact data.
Details: docs/module-notes.md, `runtime/collectives/host_collectives.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from slicer.core import dtypes
from slicer.redistribution.steps import REDUCTIONS, AllGather, AllReduce

from . import shm_collectives
from .collective_kinds import mpi_type, typed_rows
from .shm_collectives import ARRIVE, ARRIVE2, DONE

# The states of one all_reduce on a member: its block published, its chunk's MPI all_reduce in flight, its
# result chunk published, done.
_PUBLISHED, _ACROSS, _GATHERING, _DONE = range(4)


def _mpi():
    from mpi4py import MPI
    return MPI


@dataclass
class Levels:
    """A group's two levels on one rank (`plan_executor.MeshExecutor.levels`): `local`, the communicator of the
    group's members on this rank's host; `across`, that of the members with this rank's local index on every
    host; both ordered by group index. `places[j]`: member j's (local index, rank in its `across`)."""

    local: Any  # MPI communicators
    across: Any
    places: list[tuple[int, int]]

    def free(self) -> None:
        self.local.Free()
        self.across.Free()


class HostAllReduce:
    """The two-level all_reduce of one step on this rank (`plan_executor.StepRunner` owns it). ``start``
    publishes the block, ``test`` advances without blocking, ``finish`` completes into ``out``."""

    def __init__(self, program, levels: Levels, *, spins: int):
        self.p, self.levels = program, levels
        local, self.across = levels.local, levels.across
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
        """Free the shared memory (collective over the host's members; the communicators are the executor's)."""
        self.slot.free()


class HostAllGather:
    """The two-level all_gather of one step on this rank: its block goes across the hosts to the members with
    its local index (an MPI all_gather between one member per host), each publishes the blocks it received in
    shared memory, and every member copies the group's blocks out of its host's regions: a block crosses to
    each other host once, not once per member there (a flat all_gather sends it to every member)."""

    def __init__(self, program, levels: Levels, *, spins: int):
        self.p, self.levels = program, levels
        hosts = levels.across.Get_size()
        self.nbytes = int(np.prod(program.in_shape, dtype=np.int64)) * program.dtype.itemsize
        self.received = np.empty((hosts, self.nbytes), np.uint8)
        self.slot = shm_collectives.Slot(levels.local, 0, hosts * self.nbytes, spins=spins)
        self.segment = self.slot.segments[0]
        self.local_index = np.array([place[0] for place in levels.places])
        self.host_index = np.array([place[1] for place in levels.places])
        self.state = _DONE
        self.request: Any = None  # the MPI all_gather across the hosts, while in flight (an MPI.Request)

    def start(self, block: np.ndarray) -> None:
        """Send this member's block across the hosts (it stays unchanged until the step completes)."""
        self.segment = seg = self.slot.next()
        seg.epoch += 1
        byte = _mpi().BYTE
        self.request = self.levels.across.Iallgather([block, byte], [self.received, byte])
        self.state = _ACROSS

    def _publish(self) -> None:
        seg = self.segment
        np.copyto(seg.mine2[:self.received.size], self.received.reshape(-1))
        seg.publish(ARRIVE2, seg.epoch)
        self.state = _GATHERING

    def test(self) -> bool:
        """Advance as far as possible without blocking; True once every member's received blocks are there."""
        seg = self.segment
        if self.state == _ACROSS and self.request.Test() and (seg.epoch == 1 or seg.ready(DONE, seg.epoch - 1)):
            self._publish()
        return self.state == _GATHERING and seg.ready(ARRIVE2, seg.epoch)

    def finish(self, out: np.ndarray) -> None:
        """Complete the all_gather into `out` (member j's block: chunk j of the gathered dim)."""
        seg = self.segment
        if self.state == _ACROSS:
            self.request.Wait()
            if seg.epoch > 1:  # every member is done reading this segment's previous use
                seg.wait(DONE, seg.epoch - 1)
            self._publish()
        seg.wait(ARRIVE2, seg.epoch)
        regions = seg.data2[:, :self.received.size].reshape(seg.k, -1, self.nbytes)
        rows = regions[self.local_index, self.host_index]  # member j's block, in group order
        self.p.chunks.unpack_rows(typed_rows(rows, self.p.dtype), out)
        seg.publish(DONE, seg.epoch)
        self.state = _DONE

    def free(self) -> None:
        """Free the shared memory (collective over the host's members; the communicators are the executor's)."""
        self.slot.free()


#: step class -> its form in two levels (the kinds that have one).
TWO_LEVELS: dict[type, type] = {AllReduce: HostAllReduce, AllGather: HostAllGather}


def form(step) -> type | None:
    """The class of the step's form in two levels, None if its kind has none."""
    return TWO_LEVELS.get(type(step))
