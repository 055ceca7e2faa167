"""Collective steps over shared memory, for groups of ranks on one host.

Why (measured in benchmarks/README.md, "Shared memory"): on a host with fewer cores than ranks, an MPI
collective costs far more than its copies. Each of its rounds needs the peer ranks to be scheduled, and
MPICH's ranks wait by polling and sleeping (`mpiexec.wait_environment`). Here a rank that
waits sleeps in the kernel (a futex) and is woken by the store that it waits for; the data moves with one
copy into shared memory and one copy out, the packing of non-contiguous chunks fused into those copies.

Details: docs/module-notes.md, `runtime/collectives/shm_collectives.py`.
"""

from __future__ import annotations

import ctypes
import platform
import sys

import numpy as np

from slicer.core import environment
from slicer.core.errors import InternalError, OptionError, RunError
from slicer.core.host import host_cores
from slicer.redistribution.steps import REDUCTIONS

ARRIVE, ARRIVE2, DONE = 0, 16, 32  # int32 indices of the control words (one 64-byte line each)
_CTRL_BYTES = 192
_SPINS = 64  # flag checks (cheap) before sleeping on the futex, when every rank has a core
_SYS_FUTEX = 202  # x86-64
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1  # shared (not _PRIVATE): the words live in memory shared by processes
_DOUBLE_BUFFER_BYTES = 4 << 20


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_libc: ctypes.CDLL | None = None
_TIMEOUT = _Timespec(0, 200_000_000)  # re-check the word every 0.2 s even without a wake-up


def available() -> bool:
    """Shared-memory collectives work on this host: Linux futexes on x86-64."""
    global _libc
    if not (sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")):
        return False
    if _libc is None:
        try:
            _libc = ctypes.CDLL(None, use_errno=True)
            _libc.syscall.restype = ctypes.c_long
        except OSError:  # pragma: no cover - every Linux has a libc
            return False
    return True


STRATEGIES = ("auto", "mpi", "shm")


def wanted(given: str | None = None) -> str:
    """The strategy `given` (`collectives=` of a run or session), else the environment's default
    (`SLICER_COLLECTIVES`, else "auto"): "auto", "mpi" or "shm"; `OptionError` for anything else."""
    where = "collectives=" if given is not None else f"{environment.COLLECTIVES.name}="
    value = given if given is not None else (environment.value(environment.COLLECTIVES) or "auto")
    if not isinstance(value, str) or value.strip().lower() not in STRATEGIES:
        raise OptionError(f"{where}{value!r}: how ranks run collectives is one of {', '.join(STRATEGIES)} "
                          "(auto: shared memory for the groups on one host, MPI across hosts)")
    return value.strip().lower()


def spins_for(comm) -> int:
    """How long a waiting rank of `comm` polls before sleeping: not at all when the ranks on this host
    outnumber its cores (polling would take the core from a rank with work)."""
    from mpi4py import MPI

    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    ranks = local.Get_size()
    local.Free()
    return _SPINS if ranks <= host_cores() else 1


def _futex(*args) -> None:
    if _libc is None:
        raise InternalError("a shared-memory collective ran before `available()` loaded libc")
    _libc.syscall(_SYS_FUTEX, *args)


def _wait(address: int, value: int) -> None:
    _futex(ctypes.c_void_p(address), _FUTEX_WAIT, ctypes.c_int(value), ctypes.byref(_TIMEOUT), None, 0)


def _wake(address: int) -> None:
    _futex(ctypes.c_void_p(address), _FUTEX_WAKE, ctypes.c_int(1 << 30), None, None, 0)


def _round(n: int) -> int:
    return -(-n // 64) * 64


class Segment:
    """Per member of `comm`'s group: control words, a region of `region` bytes and one of `region2` bytes.
    `Segment.allocate` makes several in one shared window (one collective allocation for all of them)."""

    def __init__(self, comm, whole: np.ndarray, base: int, region: int, region2: int, spins: int):
        """`whole`: (k, bytes) view of this segment in every member's part of the window, rows `stride`
        apart; `base`: the address of member 0's row."""
        self.comm, self.k, self.me = comm, comm.Get_size(), comm.Get_rank()
        self.spins, self.region, self.region2 = spins, region, region2
        self.base, self.stride = base, whole.strides[0]
        self.ctrl = whole[:, :_CTRL_BYTES].view(np.int32)  # (k, 48)
        self.data = whole[:, _CTRL_BYTES:_CTRL_BYTES + region]  # (k, region) bytes
        self.data2 = whole[:, _CTRL_BYTES + _round(region):_CTRL_BYTES + _round(region) + region2]
        self.mine = self.data[self.me]
        self.mine2 = self.data2[self.me]
        self.ctrl[self.me, :] = 0
        self.epoch = 0

    @staticmethod
    def allocate(comm, region: int, region2: int = 0, count: int = 1, *, spins: int = _SPINS):
        """(the MPI window, `count` segments in it); collective over `comm`."""
        from mpi4py import MPI

        k = comm.Get_size()
        part = _CTRL_BYTES + _round(region) + _round(region2)
        size = part * count
        win = MPI.Win.Allocate_shared(size, 1, comm=comm)
        buffers = [np.frombuffer(win.Shared_query(r)[0].cast("B"), dtype=np.uint8) for r in range(k)]
        base = buffers[0].ctypes.data
        if any(b.ctypes.data != base + r * size for r, b in enumerate(buffers)):  # pragma: no cover
            win.Free()
            raise RunError("the shared window is not contiguous across the group; run with "
                           f"{environment.COLLECTIVES.name}=mpi")
        # one array over the group's parts of the window (consecutive in memory: checked above)
        whole = np.lib.stride_tricks.as_strided(buffers[0], shape=(k, size), strides=(size, 1))
        segments = [Segment(comm, whole[:, i * part:(i + 1) * part], base + i * part, region, region2, spins)
                    for i in range(count)]
        comm.Barrier()  # every member's words are zero before anyone uses them
        return win, segments

    def address(self, member: int, word: int) -> int:
        return self.base + member * self.stride + 4 * word

    def publish(self, word: int, epoch: int) -> None:
        self.ctrl[self.me, word] = epoch
        _wake(self.address(self.me, word))

    def ready(self, word: int, epoch: int, members=None) -> bool:
        flags = self.ctrl[:, word] if members is None else self.ctrl[members, word]
        return bool((flags >= epoch).all())

    def wait(self, word: int, epoch: int, members=None) -> None:
        """Until every member (or every one of `members`) has stored at least `epoch` in `word`."""
        column = self.ctrl[:, word]
        for _ in range(self.spins):
            if (column >= epoch).all() if members is None else (column[members] >= epoch).all():
                return
        while True:
            flags = column if members is None else column[members]
            late = np.nonzero(flags < epoch)[0]
            if not late.size:
                return
            member = int(late[0]) if members is None else int(np.asarray(members)[late[0]])
            value = int(column[member])
            if value < epoch:
                _wait(self.address(member, word), value)



class Slot:
    """Segments for one step or for several that are never in flight together (`plan_executor.MeshExecutor.
    pooled_programs`), each step using the start of their regions. Two segments used in turn, so that a step run
    back to back, or the next step of the slot, need not wait for the readers of the previous use (measured: 8
    ranks on 2 cores, 25% faster back to back); one for large blocks. Collective over `comm`."""

    def __init__(self, comm, region: int, region2: int, *, spins: int = _SPINS):
        count = 2 if region + region2 <= _DOUBLE_BUFFER_BYTES else 1
        self.win, self.segments = Segment.allocate(comm, region, region2, count, spins=spins)
        self.uses = 0

    def next(self) -> Segment:
        """The segment the next use takes."""
        segment = self.segments[self.uses % len(self.segments)]
        self.uses += 1
        return segment

    def free(self) -> None:
        if self.win is not None:
            self.win.Free()
            self.win = None


class ShmStep:
    """The shared-memory form of one step on this rank (see `plan_executor.StepRunner`, which owns it), in its own
    `Slot` or in one it shares with steps never in flight at the same time (`slot`; not a permute's, whose members
    read only their source). What the kind copies in and out is its `collective_kinds.Execution`."""

    def __init__(self, program, comm, *, spins: int = _SPINS, slot: Slot | None = None):
        self.p = program
        self.kind = program.kind
        self.combine = REDUCTIONS[program.step.reduction]  # a reducing step: np.add, or np.maximum
        self.nbytes, self.region2 = self.kind.shm_regions(program, comm.Get_size())
        self.owned = slot is None
        self.slot = Slot(comm, self.nbytes, self.region2, spins=spins) if slot is None else slot
        self.segment = self.slot.segments[0]
        self.k, self.me = self.segment.k, self.segment.me
        self.readers = self.kind.shm_readers(program)  # None: every member reads every member's region
        self.sources = self.kind.shm_sources(program)  # None: this member reads every member's region

    def test(self) -> bool:
        seg = self.segment
        return seg.ready(ARRIVE, seg.epoch, self.sources)

    def start(self, block: np.ndarray) -> None:
        """Copy this member's block into its region (packed by chunks where the step needs it) and publish it."""
        self.segment = self.slot.next()
        seg, p = self.segment, self.p
        seg.epoch += 1
        e = seg.epoch
        if self.readers is not None and not self.readers:  # nobody reads this member's region
            seg.publish(ARRIVE, e)
            return
        if e > 1:  # the readers of the previous epoch are done with this region
            seg.wait(DONE, e - 1, self.readers)
        self.kind.shm_in(p, self, block, seg.mine[:self.nbytes].view(p.dtype))
        seg.publish(ARRIVE, e)

    def finish(self, out: np.ndarray, block: np.ndarray) -> None:
        """Wait for the members this rank reads, copy (and combine) into `out`, and say it is done reading."""
        seg = self.segment
        if self.sources is None or self.sources:
            seg.wait(ARRIVE, seg.epoch, self.sources)
        data = seg.data[:, :self.nbytes]  # (k, this step's bytes): the segment may be larger (a shared slot)
        self.kind.shm_out(self.p, self, data, out, block)
        seg.publish(DONE, seg.epoch)

    def second_phase(self) -> None:
        """Publish this member's second region and wait for every member's (a two-phase all_reduce)."""
        seg = self.segment
        seg.publish(ARRIVE2, seg.epoch)
        seg.wait(ARRIVE2, seg.epoch)

    def free(self) -> None:
        """Free this step's slot, unless it shares one (`MeshExecutor` frees those)."""
        if self.owned:
            self.slot.free()
