"""MPI executor: runs a plan on real ranks with mpi4py, one block per rank.

Communicators are built once per mesh: a Cartesian communicator over ``mesh.shape`` (no reordering, so
Cartesian rank = linear device rank, row-major as everywhere in Slicer) and, lazily, one sub-communicator
per group of mesh axes, split so that the sub-rank equals the device's group index over the axes (major to
minor; ``Cart_sub`` would impose mesh order instead). Nothing is ever gathered to one rank.

Details: docs/module-notes.md, `runtime/collectives/plan_executor.py`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import Any

import numpy as np

from slicer.core.errors import RedistributionError
from slicer.core.mesh import Mesh
from slicer.redistribution.steps import Step
from slicer.redistribution.types import DistType

from . import collective_kinds, communicators, host_collectives, shm_collectives

_PLAN_CACHE = 8  # plan programs kept per executor (each holds its buffers)


def _mpi():
    from mpi4py import MPI
    return MPI


@dataclass
class Phases:
    """Seconds spent by one step on this rank: packing, issuing the MPI call, waiting for it to complete
    (the transfer as this rank sees it), unpacking."""

    pack: float = 0.0
    issue: float = 0.0
    transfer: float = 0.0
    unpack: float = 0.0

    @property
    def total(self) -> float:
        return self.pack + self.issue + self.transfer + self.unpack


class Pending:
    """A started step: ``wait()`` completes it and returns the output block."""

    __slots__ = ("program", "requests", "block", "out", "recv", "phases")

    def __init__(self, program, requests, block, out, recv, phases):
        self.program, self.requests, self.block, self.out, self.recv = program, requests, block, out, recv
        self.phases = phases

    @property
    def progresses(self) -> bool:
        """The transfer advances only when asked (`test`) between the rank's other work: MPI requests, or the
        steps of a collective in two levels (`host_collectives`)."""
        return bool(self.requests) or self.program.hier is not None

    def test(self) -> bool:
        """Let MPI progress the transfer; True once it is complete (or, over shared memory, once every
        member's data is there)."""
        if self.program.shm is not None:
            return self.program.shm.test()
        if self.program.hier is not None:
            return self.program.hier.test()
        return not self.requests or _mpi().Request.Testall(self.requests)

    def wait(self) -> np.ndarray:
        start = perf_counter()
        if self.requests:
            _mpi().Request.Waitall(self.requests)
        waited = perf_counter()
        out = self.program.finish(self)
        if self.program.shm is not None or self.program.hier is not None:  # waiting and copying out: one step
            self.phases.transfer, self.phases.unpack = perf_counter() - start, 0.0
        else:
            self.phases.transfer, self.phases.unpack = waited - start, perf_counter() - waited
        self.block = self.recv = self.requests = None
        if self.program.release is not None:
            self.program.release(self.program)
        return out


class StepRunner:
    """One step on this rank for one input block shape and dtype, with the buffers it reuses; what the step's
    kind does is its `collective_kinds.Execution` (`kind`), whose ``prepare`` gives the runner its group
    communicator (``comm``), its packing (``k``, ``chunks``, ``send_chunks``, ``order``, ``wide``, the ``send``
    and ``recv`` buffers) and what else the kind needs (a permute's ``source`` and ``target``).

    ``start(block, out)`` packs, issues the nonblocking MPI call and returns a :class:`Pending`; ``run`` is
    the blocking form. ``out`` is the output block to fill (a fresh array when None): it must not be in use.
    The block must stay unchanged until the step completes."""

    def __init__(self, ex: MeshExecutor, step: Step, in_shape: tuple[int, ...], dtype: np.dtype, *,
                 pooled: bool = False):
        """`pooled`: over shared memory, the step's segments come later (`attach_slot`), shared with steps never in
        flight at the same time (`MeshExecutor.pooled_programs`); `pooled_comm` says on which group, None: not."""
        self.step, self.in_shape, self.dtype = step, tuple(in_shape), np.dtype(dtype)
        self.kind = collective_kinds.execution(step)
        self.comm: Any = None  # the group's communicator (an mpi4py Intracomm), set by the kind's `prepare`
        self.pooled_comm: Any = None
        self.out_shape = tuple(step.type_after.local_shape(ex.mesh))
        self.op = step.op
        # packed buffers (None: the block / the output is the buffer)
        self.send: np.ndarray | None = None
        self.recv: np.ndarray | None = None
        self.owned_out: np.ndarray | None = None  # an output block owned by this program (PlanRunner's intermediates)
        self.shm: shm_collectives.ShmStep | None = None  # the shared-memory form of the step, when on one host
        self.hier: Any = None  # its form in two levels, when the group spans hosts with several members on each
        # called when a started step completes (MeshExecutor.start's pool)
        self.release: Callable[[StepRunner], None] | None = None
        use_shm = self.kind.prepare(self, ex)
        if use_shm and pooled and self.kind.poolable:
            self.pooled_comm = self.comm
        elif use_shm:
            self.shm = shm_collectives.ShmStep(self, self.comm, spins=ex.spins)
        elif (two_levels := host_collectives.form(step)) and (levels := ex.levels(self.comm)) is not None:
            self.hier = two_levels(self, levels, spins=ex.spins)

    def attach_slot(self, slot, spins: int) -> None:
        """Run over shared memory in `slot` (a pooled program: see `__init__`)."""
        self.shm = shm_collectives.ShmStep(self, self.pooled_comm, spins=spins, slot=slot)

    def new_out(self) -> np.ndarray:
        return np.empty(self.out_shape, self.dtype)

    def free(self) -> None:
        """Free the shared memory (collective over the step's group, like its creation)."""
        if self.shm is not None:
            self.shm.free()
            self.shm = None
        if self.hier is not None:
            self.hier.free()
            self.hier = None

    # -- the step ----------------------------------------------------------------------------------------
    def start(self, block: np.ndarray, out: np.ndarray | None = None) -> Pending:
        t0 = perf_counter()
        if self.shm is not None:  # (the output block is made when the data is copied out: `finish`)
            out = block if self.kind.keeps_block(self) else out
            self.shm.start(block)
            return Pending(self, [], block, out, None, Phases(perf_counter() - t0))
        if self.hier is not None:
            self.hier.start(block)
            return Pending(self, [], block, out, None, Phases(perf_counter() - t0))
        out = self.kind.output(self, block, out)
        send = self.kind.pack(self, block, out)
        recv = self.recv if self.recv is not None else out
        t1 = perf_counter()
        requests = self.kind.issue(self, send, recv)
        return Pending(self, requests, block, out, recv, Phases(t1 - t0, perf_counter() - t1))

    def run(self, block: np.ndarray, out: np.ndarray | None = None) -> tuple[np.ndarray, Phases]:
        """The step, blocking: the output block and its phases (shared memory: `start` then `wait`; MPI: the
        blocking call, which for sums may use another algorithm than the nonblocking one, hence other bits
        in the last place: the runtime always uses `start`)."""
        if self.shm is not None or self.hier is not None:
            pending = self.start(block, out)
            return pending.wait(), pending.phases
        t0 = perf_counter()
        out = self.kind.output(self, block, out)
        send = self.kind.pack(self, block, out)
        recv = self.recv if self.recv is not None else out
        t1 = perf_counter()
        self.kind.call(self, send, recv)
        t2 = perf_counter()
        self.finish(Pending(self, [], block, out, recv, None))
        return out, Phases(t1 - t0, 0.0, t2 - t1, perf_counter() - t2)

    def finish(self, pending: Pending) -> np.ndarray:
        """Unpack what a completed transfer received into the output block."""
        out, recv = pending.out, pending.recv
        if self.shm is not None:
            out = self.new_out() if out is None else out
            self.shm.finish(out, pending.block)
            return out
        if self.hier is not None:
            out = self.new_out() if out is None else out
            self.hier.finish(out)
            return out
        if recv is not None and recv is not out:
            self.kind.unpack(self, recv, out)
        return out


class PlanRunner:
    """A plan on this rank for one source block shape and dtype: its step programs, and one reused output
    block per intermediate step. The final block is always a fresh array the caller owns."""

    def __init__(self, ex: MeshExecutor, plan, shape: tuple[int, ...], dtype: np.dtype):
        self.programs = []
        for step, _before in zip(plan.steps, plan.trace.types):
            program = ex.program(step, shape, dtype)
            self.programs.append(program)
            shape = program.out_shape
        for program in self.programs[:-1]:
            if not program.kind.keeps_block(program):
                program.owned_out = program.new_out()

    def free(self) -> None:
        for program in self.programs:
            program.free()

    def run(self, block: np.ndarray, phases: list | None = None) -> np.ndarray:
        owned = {id(p.owned_out) for p in self.programs if p.owned_out is not None}
        for program in self.programs:
            block, step_phases = program.run(block, program.owned_out)
            if phases is not None:
                phases.append(step_phases)
        return block.copy() if id(block) in owned else block


class MeshExecutor:
    """Executes plans on ``comm`` (size must equal ``mesh.device_count``); reuse it for many plans.

    ``strategy``: "mpi" (MPI collectives), "shm" (shared memory, :mod:`.shm_collectives`; refused when a group spans
    hosts) or "auto" (the default, or ``SLICER_COLLECTIVES`` in the environment): shared memory for every
    group whose ranks share one host, where :func:`.shm_collectives.available` holds, and two levels
    (:mod:`.host_collectives`) for an all_reduce or all_gather over a group with as many members on each of
    several hosts.

    ``hosts``: the host of each rank (any labels), as MPI's shared-memory split finds them when None; given,
    it simulates hosts among ranks that share one (a test of the two-level collectives on one machine)."""

    def __init__(self, mesh: Mesh, comm=None, *, strategy: str | None = None, hosts=None):
        MPI = _mpi()
        comm = comm if comm is not None else MPI.COMM_WORLD
        if comm.Get_size() != mesh.device_count:
            raise RedistributionError(
                f"the communicator has {comm.Get_size()} ranks but the mesh {mesh} has {mesh.device_count} "
                f"devices: run with mpiexec -n {mesh.device_count}")
        self.mesh = mesh
        self.cart = comm.Create_cart(list(mesh.shape), periods=[False] * mesh.ndim, reorder=False)
        self.rank = self.cart.Get_rank()
        self.coords = dict(zip(mesh.axis_names, mesh.coords(self.rank)))
        self._subs: dict = {}
        self._steps: dict = {}
        self._plans: OrderedDict = OrderedDict()
        self._pools: dict = {}  # start(): programs not in flight, per step
        self._programs: list = []  # every program made, freed by close()
        self._slots: list = []  # shared-memory slots of pooled programs, freed by close()
        self._on_host: dict = {}
        self._levels: dict = {}
        self.hosts = self._host_labels(hosts)
        self.strategy = strategy or shm_collectives.wanted()
        self.spins = shm_collectives.spins_for(comm)
        if self.strategy not in ("auto", "mpi", "shm"):
            raise RedistributionError(f"strategy {self.strategy!r}: use 'auto', 'mpi' or 'shm'")

    # -- communicators ------------------------------------------------------------------------------------
    def group_index(self, axes: tuple[str, ...]) -> int:
        return communicators.group_index(self.mesh, self.coords, axes)

    def sub(self, axes: tuple[str, ...]):
        """The communicator of this rank's group over ``axes`` (axes or sub-axes, see `communicators`); its
        rank is the group index."""
        comm = self._subs.get(axes)
        if comm is None:
            color, key = communicators.color_key(self.mesh, self.coords, axes)
            comm = self.cart.Split(color=color, key=key)
            self._subs[axes] = comm
        return comm

    def _host_labels(self, hosts) -> list:
        """The host of each rank of the job (collective): the lowest rank sharing its memory, or `hosts`."""
        if hosts is not None:
            if len(hosts) != self.cart.Get_size():
                raise RedistributionError(f"hosts: {len(hosts)} labels for {self.cart.Get_size()} ranks")
            return list(hosts)
        local = self.cart.Split_type(_mpi().COMM_TYPE_SHARED)
        lowest = local.allreduce(self.rank, op=_mpi().MIN)
        local.Free()
        return self.cart.allgather(lowest)

    def use_shm(self, comm) -> bool:
        """Whether steps on ``comm`` (a group of this executor) run over shared memory."""
        if self.strategy == "mpi" or not shm_collectives.available():
            return False
        key = id(comm)
        if key not in self._on_host:  # (collective over the group, as every program's creation)
            self._on_host[key] = len({self.hosts[r] for r in comm.allgather(self.rank)}) == 1
        if self.strategy == "shm" and not self._on_host[key]:
            raise RedistributionError("strategy 'shm': a group of ranks spans several hosts; use 'auto' or 'mpi'")
        return self._on_host[key]

    def levels(self, comm) -> host_collectives.Levels | None:
        """For a collective in two levels on ``comm`` (`host_collectives`): its communicators within this rank's
        host and across the hosts, and where each member is; None when the strategy is not "auto", shared memory
        is not available, or the group is not on several hosts with as many members (at least 2) on each.
        Collective over the group the first time; the steps on one group share its communicators (a step's
        nonblocking collectives start in one order on every rank, as on the group's own), freed by `close`."""
        if self.strategy != "auto" or not shm_collectives.available():
            return None
        key = id(comm)
        if key not in self._levels:
            members = [self.hosts[r] for r in comm.allgather(self.rank)]  # host of each member, by group index
            counts = {h: members.count(h) for h in members}
            eligible = len(counts) > 1 and min(counts.values()) == max(counts.values()) > 1
            self._levels[key] = members if eligible else None
        members = self._levels[key]
        if members is None or isinstance(members, host_collectives.Levels):
            return members
        me = comm.Get_rank()
        hosts = list(dict.fromkeys(members))
        local = comm.Split(color=hosts.index(self.hosts[self.rank]), key=me)
        across = comm.Split(color=local.Get_rank(), key=me)
        local_index = [members[:j].count(h) for j, h in enumerate(members)]
        places = [(i, local_index[:j].count(i)) for j, i in enumerate(local_index)]
        levels = self._levels[key] = host_collectives.Levels(local, across, places)
        return levels

    def close(self) -> None:
        """Free the shared memory and communicators (collective: every rank calls it)."""
        for program in self._programs:
            program.free()
        self._programs.clear()
        for slot in self._slots:
            slot.free()
        self._slots.clear()
        for levels in self._levels.values():
            if isinstance(levels, host_collectives.Levels):
                levels.free()
        self._levels.clear()
        for comm in self._subs.values():
            comm.Free()
        self._subs.clear()
        self._steps.clear()
        self._plans.clear()
        self._pools.clear()
        self.cart.Free()

    # -- programs -----------------------------------------------------------------------------------------
    def program(self, step: Step, shape: tuple[int, ...], dtype, *, pooled: bool = False) -> StepRunner:
        """A new program of ``step`` for blocks of ``shape`` and ``dtype`` (its own buffers: give each step
        that may be in flight at the same time its own program; `pooled`: see `pooled_programs`)."""
        program = StepRunner(self, step, tuple(shape), np.dtype(dtype), pooled=pooled)
        self._programs.append(program)
        return program

    def pooled_programs(self, steps: Sequence[tuple[Step, tuple[int, ...], object]],
                        spans: list[tuple[int, int]]) -> list[StepRunner]:
        """Programs of `steps` ((step, block shape, dtype) each), step i in flight from position `spans[i][0]` to
        `spans[i][1]` of a schedule every rank follows. Steps over shared memory on the same group (Permute aside)
        share segments when never in flight together, each slot as large as its largest step (`Slot`): a rank
        running a training step held one pair of segments per collective, about twice its FSDP shards and its
        gradients, for the executor's life. Slots are handed out in schedule order, the same on every rank, and
        allocated in that order (each allocation is collective over its group)."""
        programs = [self.program(step, shape, dtype, pooled=True) for step, shape, dtype in steps]
        slots: dict[int, list[list]] = {}  # per group: [free from (its last step's end), bytes, bytes, programs]
        order = []
        for i in sorted(range(len(steps)), key=lambda i: spans[i]):
            program = programs[i]
            if program.pooled_comm is None:
                continue
            region, region2 = program.kind.shm_regions(program, program.pooled_comm.Get_size())
            free = [slot for slot in slots.setdefault(id(program.pooled_comm), []) if slot[0] < spans[i][0]]
            fits = [slot for slot in free if slot[1] >= region and slot[2] >= region2]
            slot = min(fits, key=lambda s: s[1] + s[2]) if fits else max(free, key=lambda s: s[1] + s[2], default=None)
            if slot is None:
                slot = [0, 0, 0, []]
                slots[id(program.pooled_comm)].append(slot)
                order.append(slot)
            slot[0], slot[1], slot[2] = spans[i][1], max(slot[1], region), max(slot[2], region2)
            slot[3].append(program)
        for _, region, region2, members in order:
            shared = shm_collectives.Slot(members[0].pooled_comm, region, region2, spins=self.spins)
            self._slots.append(shared)
            for program in members:
                program.attach_slot(shared, self.spins)
        return programs

    def _cached_step(self, step: Step, block: np.ndarray) -> StepRunner:
        key = (step, block.shape, block.dtype.str)
        program = self._steps.get(key)
        if program is None:
            program = self._steps[key] = self.program(step, block.shape, block.dtype)
        return program

    def plan_program(self, plan, shape: tuple[int, ...], dtype) -> PlanRunner:
        """The (cached) program of ``plan`` for source blocks of ``shape`` and ``dtype``."""
        key = (plan, tuple(shape), np.dtype(dtype).str)
        program = self._plans.get(key)
        if program is None:
            program = self._plans[key] = PlanRunner(self, plan, tuple(shape), np.dtype(dtype))
            while len(self._plans) > _PLAN_CACHE:  # every rank evicts the same plan: freeing is collective
                _, old = self._plans.popitem(last=False)
                old.free()
                gone = {id(p) for p in old.programs}
                self._programs = [p for p in self._programs if id(p) not in gone]
        else:
            self._plans.move_to_end(key)
        return program

    # -- execution ----------------------------------------------------------------------------------------
    def run(self, plan, block: np.ndarray, *, phases: list | None = None) -> np.ndarray:
        """Execute every step of ``plan`` on this rank's source block; returns its target block (a new array).
        With ``phases`` (a list), appends each step's :class:`Phases`."""
        expected = plan.src.local_shape(plan.mesh)
        if block.shape != expected:
            raise RedistributionError(f"rank {self.rank}: block of shape {block.shape}, type {plan.src} needs "
                                      f"{expected}")
        block = np.require(block, requirements="C")
        return self.plan_program(plan, block.shape, block.dtype).run(block, phases)

    def step(self, step: Step, before: DistType, block: np.ndarray) -> np.ndarray:
        """One step, blocking; returns a new output block (or ``block`` itself when a permute leaves it)."""
        block = np.require(block, requirements="C")
        return self._cached_step(step, block).run(block)[0]

    def start(self, step: Step, before: DistType, block: np.ndarray) -> Pending:
        """One step, started: ``.wait()`` on the result returns the output block. Steps in flight together
        use distinct programs (a pool per step, the same on every rank when every rank starts and waits for
        the same steps in the same order)."""
        block = np.require(block, requirements="C")
        key = (step, block.shape, block.dtype.str)
        pool = self._pools.setdefault(key, [])
        program = pool.pop() if pool else self.program(step, block.shape, block.dtype)
        program.release = pool.append
        return program.start(block)
