"""Live resharding: a session's state moved to another program's layout on the same ranks, without files.

`Session.reshard(program)` switches a running session to another compiled program of the same model (another
strategy, or another mesh of the same device count): every state value the new program takes is moved from
its old distributed type to its new one in place on the ranks, by a plan of the redistribution synthesizer
(`redistribution.plan`, run by `plan_executor.MeshExecutor`), so no value is assembled anywhere and nothing
goes through the file system or the driver. Values the new program does not take are dropped; a value it
needs that the old one lacks, or holds with another shape or dtype, is an InputError before anything moves;
another device count is refused (a checkpoint, `save` + `load`, moves state between those).

Both layouts must be types on one mesh. When the two meshes are the same, that mesh; otherwise (x=2 and y=2,
or x=2,y=2 and x=4) every axis of either mesh is a part of one axis over all the devices, `d` (row-major ranks:
axis `a` of size n after axes of product p is the sub-axis `d:(p)n`, `subaxes`), and the synthesizer plans on
`d` with sub-axes. `plan_moves` plans every value (`Reshard.explain()`: per value the plan, the bytes each
device receives against the synthesizer's lower bound, its peak bytes and predicted time); `move_blocks` is
a rank's part of running them (`loaded_programs.LoadedPrograms.move_state`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from slicer.core.errors import InputError, ResourceError
from slicer.core.mesh import Mesh
from slicer.redistribution import DistType, Plan, plan, subaxes

COMMON_AXIS = "d"  # the one axis of the common mesh of two different meshes


@dataclass(frozen=True)
class Move:
    """One state value's move: its name, argument index in the old and the new program, and the plan."""

    name: str
    old: int
    new: int
    plan: Plan

    def line(self) -> str:
        p = self.plan
        bound = "at" if p.reaches_lower_bound else f"above ({p.lower_bound_bytes_per_device} B)"
        steps = " ; ".join(str(step) for step in p.steps) or "no communication"
        return (f"{self.name}: {p.src} -> {p.dst} on {p.mesh}: {steps}; received {p.bytes_received_per_device} "
                f"B/device, {bound} the lower bound; peak {p.peak_bytes_per_device} B/device; "
                f"predicted {p.estimated_seconds() * 1e6:.1f} us")


STACK_BYTES = 4 << 20  # a stack's source bytes per device at most (its copy is held while it moves)


@dataclass(frozen=True)
class Stack:
    """Moves of values sharing one plan, run as one collective sequence: the blocks stacked on a new leading dim
    and moved by `plan`, that plan lifted to the stack (the same steps, the leading dim whole). A state holds many
    values of one shape and layout (each layer's weights, their optimizer moments), and a move of small values
    costs its collectives' latency, not their bytes. `members`: indices into `Reshard.moves`; `plan` None for a
    single move, run by its own plan."""

    members: tuple[int, ...]
    plan: Plan | None = None


@dataclass(frozen=True)
class Reshard:
    """Every move of a switch between two programs, on the mesh they share (`mesh`), what is dropped, and how
    the moves run (`stacks`, in order; empty: one after another, each by its own plan)."""

    mesh: Mesh
    moves: tuple[Move, ...]
    dropped: tuple[str, ...]
    stacks: tuple[Stack, ...] = ()

    @property
    def runs(self) -> tuple[Stack, ...]:
        """The stacks the moves run as (each move alone when none were made)."""
        return self.stacks or tuple(Stack((i,)) for i in range(len(self.moves)))

    def unstacked(self) -> Reshard:
        return replace(self, stacks=())

    @property
    def bytes_received_per_device(self) -> int:
        """The bytes a device receives over all the moves (max over devices of each plan's, summed)."""
        return sum(m.plan.bytes_received_per_device for m in self.moves)

    @property
    def lower_bound_bytes_per_device(self) -> int:
        return sum(m.plan.lower_bound_bytes_per_device for m in self.moves)

    @property
    def peak_bytes_per_device(self) -> int:
        """The predicted peak of state bytes on a device while the moves run one after another (the values
        dropped freed first, each old block freed once moved): the old blocks not yet moved, the new ones made,
        and the running plan's peak (which counts its source block). The executor's buffers come on top."""
        old = sum(m.plan.src_bytes for m in self.moves)
        peak, made = old, 0
        for stack in self.runs:
            members = [self.moves[i].plan for i in stack.members]
            src, dst = sum(p.src_bytes for p in members), sum(p.dst_bytes for p in members)
            if stack.plan is not None:  # each block freed once copied into the stack: one more block at most
                peak = max(peak, old + made + members[0].src_bytes)
            old -= src
            peak = max(peak, old + made + (stack.plan or members[0]).peak_bytes_per_device)
            made += dst
        return peak

    @property
    def budget_bytes(self) -> int:
        """The default budget per device: the larger of the old and the new state plus the largest value's plan
        memory bound beyond its blocks (`Plan.memory_bound_bytes`): what the moves need one by one."""
        old, new = (sum(m.plan.src_bytes for m in self.moves), sum(m.plan.dst_bytes for m in self.moves))
        extra = max((m.plan.memory_bound_bytes - max(m.plan.src_bytes, m.plan.dst_bytes) for m in self.moves),
                    default=0)
        return max(old, new) + extra

    def check_budget(self, budget: int | None = None) -> Reshard:
        """The moves as they will run within `budget` bytes per device (default `budget_bytes`, what they need
        one by one): the largest stacks (up to `STACK_BYTES`, halved until they fit) whose peak fits, else one by
        one; ResourceError, before anything moves, when even that exceeds it."""
        budget = self.budget_bytes if budget is None else budget
        if self.peak_bytes_per_device <= budget:
            return self
        single = self.unstacked()
        if single.peak_bytes_per_device > budget:
            raise ResourceError(f"resharding would hold {single.peak_bytes_per_device} B per device at its peak, "
                                f"over the budget of {budget} B: raise the budget or save and load the session")
        return self.within(budget)

    def within(self, budget: int) -> Reshard:
        """The moves stacked as much as `budget` allows (see `check_budget`; one by one when no stack fits)."""
        single, limit = self.unstacked(), STACK_BYTES
        lifted: dict[tuple, Plan] = {}
        smallest = min((m.plan.src_bytes for m in self.moves if m.plan.steps), default=0)
        while smallest and limit >= 2 * smallest:
            stacked = with_stacks(single, limit, lifted)
            if stacked.peak_bytes_per_device <= budget:
                return stacked
            limit //= 2
        return single

    def explain(self) -> str:
        """Per value its plan, bytes received per device (against the lower bound), peak bytes and time."""
        head = (f"reshard on {self.mesh}: {len(self.moves)} value(s), {self.bytes_received_per_device} B received "
                f"per device (lower bound {self.lower_bound_bytes_per_device} B), predicted peak "
                f"{self.peak_bytes_per_device} B per device (budget {self.budget_bytes} B)")
        dropped = [f"dropped (the new program does not take them): {', '.join(self.dropped)}"] if self.dropped else []
        stacked = [f"stacked, one collective sequence each: {', '.join(self.moves[i].name for i in s.members)}"
                   for s in self.runs if s.plan is not None]
        return "\n".join([head, *(m.line() for m in self.moves), *stacked, *dropped])

    def __str__(self) -> str:
        return self.explain()


def common_mesh(old: Mesh, new: Mesh) -> Mesh:
    """The mesh both layouts are typed on: `old` itself when the meshes are equal, else one axis over all
    the devices. InputError for another device count."""
    if old.device_count != new.device_count:
        raise InputError(f"cannot reshard a session on {old} ({old.device_count} devices) to a program on {new} "
                         f"({new.device_count} devices): live resharding keeps the ranks; save the session "
                         "(session.save(dir)) and load it in a session of the new program (session.load(dir))")
    return old if old == new else Mesh({COMMON_AXIS: old.device_count})


def on_mesh(dist: DistType, mesh: Mesh, common: Mesh) -> DistType:
    """`dist` (a type on `mesh`) as a type on `common` (`mesh` itself, or its one axis `d`)."""
    if common == mesh:
        return dist
    n, pre = common.device_count, {}
    before = 1
    for name, size in mesh.axes:
        pre[name] = (before, size)
        before *= size

    def token(text: str) -> list[str]:
        name, m, k = subaxes.split_token(text)
        start, whole = pre[name]
        k = whole if k is None else k
        return [] if k == 1 else [subaxes.token(COMMON_AXIS, start * m, k, n)]

    dims = [[t for axis in axes for t in token(axis)] for axes in dist.dims]
    partial = [t for axis in dist.partial for t in token(axis)]
    return DistType.of(common, dist.shape, dims, partial)


def plan_moves(old, new) -> Reshard:
    """The moves from session plan `old`'s state to session plan `new`'s (`session.SessionPlan`s): every
    value `new` holds as state, by name. InputError, before anything moves, for a value `new` needs and `old`
    lacks, another shape or dtype, a partial sum, or another device count."""
    g_old, g_new = old.graph, new.graph
    common = common_mesh(g_old.mesh, g_new.mesh)
    have = {old.arg_names[i]: i for i in old.state}
    missing = [new.arg_names[i] for i in sorted(new.state) if new.arg_names[i] not in have]
    if missing:
        raise InputError(f"the new program needs state {missing} that the session does not hold (it holds "
                         f"{sorted(have)}): reshard to a program of the same model, or start a session of it")
    moves, planned = [], {}  # values of one model share few (type, type) pairs: each planned once
    for index in sorted(new.state):
        name = new.arg_names[index]
        was = have[name]
        a, b = g_old.values[g_old.args[was]], g_new.values[g_new.args[index]]
        if g_old.arg_shape(was) != g_new.arg_shape(index) or np.dtype(a.numpy_dtype) != np.dtype(b.numpy_dtype):
            raise InputError(f"state '{name}' is {np.dtype(a.numpy_dtype)}{list(g_old.arg_shape(was))} in the session "
                             f"but {np.dtype(b.numpy_dtype)}{list(g_new.arg_shape(index))} in the new program: "
                             "reshard to a program of the same model")
        if a.dist.partial or b.dist.partial or a.dist.shape != b.dist.shape:
            raise InputError(f"state '{name}' is laid out as {a.dist} in the session and {b.dist} in the new "
                             "program: live resharding moves values held whole (no partial sums) and padded alike "
                             "(an uneven dim is padded per layout); save and load the session instead")
        src, dst = on_mesh(a.dist, g_old.mesh, common), on_mesh(b.dist, g_new.mesh, common)
        if (src, dst, a.dtype) not in planned:
            planned[src, dst, a.dtype] = plan(common, src, dst, dtype=a.dtype)
        moves.append(Move(name, was, index, planned[src, dst, a.dtype]))
    taken = {m.name for m in moves}
    moves.sort(key=lambda m: m.plan.dst_bytes - m.plan.src_bytes)  # those freeing memory first (a stable sort)
    single = Reshard(common, tuple(moves), tuple(sorted(n for n in have if n not in taken)))
    return single.within(single.budget_bytes)


def with_stacks(reshard: Reshard, limit: int = STACK_BYTES, lifted: dict | None = None) -> Reshard:
    """`reshard` with its moves grouped into stacks by plan (the same types, shape and dtype), in the order of
    their first member, each stack cut to at most `limit` bytes of source per device; a group of one, or a move
    with nothing to communicate, runs its own plan. `lifted`: the stacks' plans made so far, by (plan's types,
    dtype, count), to reuse (a dict filled here)."""
    groups: dict[tuple, list[list[int]]] = {}
    order: list[list[int]] = []
    for index, move in enumerate(reshard.moves):
        chunks = groups.setdefault((move.plan.src, move.plan.dst, move.plan.dtype), [])
        if not move.plan.steps:  # nothing to communicate: kept as it is
            order.append([index])
            continue
        if not chunks or (len(chunks[-1]) + 1) * move.plan.src_bytes > limit:
            chunks.append([])
            order.append(chunks[-1])
        chunks[-1].append(index)
    if all(len(members) == 1 for members in order):
        return reshard.unstacked()
    lifted = {} if lifted is None else lifted
    return replace(reshard, stacks=tuple(Stack(tuple(members), _stacked_plan(reshard, members, lifted)
                                               if len(members) > 1 else None) for members in order))


def _stacked_plan(reshard: Reshard, members: list[int], lifted: dict) -> Plan:
    """The shared plan of `members` lifted to their stack: a new leading dim, whole on every device."""
    p = reshard.moves[members[0]].plan
    key = (p.src, p.dst, p.dtype, len(members))
    if key not in lifted:
        lift = lambda d: DistType.of(reshard.mesh, (len(members), *d.shape), [[], *d.dims], d.partial)  # noqa: E731
        lifted[key] = plan(reshard.mesh, lift(p.src), lift(p.dst), dtype=p.dtype)
    return lifted[key]


def target_plan(plan, program):
    """The session plan of `program` (a compiled program, its `session_plan` holding `plan`'s state names as
    state; or a `SessionPlan` as it is) to reshard a session of `plan` to."""
    if not hasattr(program, "session_plan"):
        return program
    return program.session_plan([plan.arg_names[i] for i in sorted(plan.state)])


def move_blocks(executor, reshard: Reshard, blocks: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    """A rank's part of every move (collective: every rank calls it with the same `reshard`): its old blocks
    (old argument index -> block) in, its new blocks (new argument index -> block) out. `executor` is a
    `plan_executor.MeshExecutor` on `reshard.mesh`; each old block is taken out of `blocks` as it moves, so it
    is freed once moved."""
    moved = {}
    for stack in reshard.runs:
        members = [reshard.moves[i] for i in stack.members]
        if stack.plan is None:
            move = members[0]
            block = np.reshape(blocks.pop(move.old), move.plan.src.local_shape(reshard.mesh))
            moved[move.new] = executor.run(move.plan, block) if move.plan.steps else block
            continue
        shape = members[0].plan.src.local_shape(reshard.mesh)
        stacked = np.empty((len(members), *shape), np.asarray(blocks[members[0].old]).dtype)
        for k, move in enumerate(members):  # each old block freed once copied (`peak_bytes_per_device`)
            stacked[k] = np.reshape(blocks.pop(move.old), shape)
        out = executor.run(stack.plan, stacked)
        del stacked
        for k, move in enumerate(members):
            moved[move.new] = out[k]
    return moved


__all__ = ["COMMON_AXIS", "STACK_BYTES", "Move", "Reshard", "Stack", "common_mesh", "move_blocks", "on_mesh",
           "plan_moves", "target_plan", "with_stacks"]
