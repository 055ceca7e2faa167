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

from dataclasses import dataclass

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


@dataclass(frozen=True)
class Reshard:
    """Every move of a switch between two programs, on the mesh they share (`mesh`), and what is dropped."""

    mesh: Mesh
    moves: tuple[Move, ...]
    dropped: tuple[str, ...]

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
        for m in self.moves:
            old -= m.plan.src_bytes
            peak = max(peak, old + made + m.plan.peak_bytes_per_device)
            made += m.plan.dst_bytes
        return peak

    @property
    def budget_bytes(self) -> int:
        """The default budget per device: the larger of the old and the new state plus the largest plan's
        memory bound beyond its blocks (`Plan.memory_bound_bytes`)."""
        old, new = (sum(m.plan.src_bytes for m in self.moves), sum(m.plan.dst_bytes for m in self.moves))
        extra = max((m.plan.memory_bound_bytes - max(m.plan.src_bytes, m.plan.dst_bytes) for m in self.moves),
                    default=0)
        return max(old, new) + extra

    def check_budget(self, budget: int | None = None) -> None:
        """ResourceError, before anything moves, when the predicted peak exceeds `budget` bytes per device
        (default `budget_bytes`)."""
        budget = self.budget_bytes if budget is None else budget
        if self.peak_bytes_per_device > budget:
            raise ResourceError(f"resharding would hold {self.peak_bytes_per_device} B per device at its peak, over "
                                f"the budget of {budget} B: raise the budget or save and load the session")

    def explain(self) -> str:
        """Per value its plan, bytes received per device (against the lower bound), peak bytes and time."""
        head = (f"reshard on {self.mesh}: {len(self.moves)} value(s), {self.bytes_received_per_device} B received "
                f"per device (lower bound {self.lower_bound_bytes_per_device} B), predicted peak "
                f"{self.peak_bytes_per_device} B per device (budget {self.budget_bytes} B)")
        dropped = [f"dropped (the new program does not take them): {', '.join(self.dropped)}"] if self.dropped else []
        return "\n".join([head, *(m.line() for m in self.moves), *dropped])

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
    return Reshard(common, tuple(moves), tuple(sorted(n for n in have if n not in taken)))


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
    for move in reshard.moves:
        block = np.reshape(blocks.pop(move.old), move.plan.src.local_shape(reshard.mesh))
        moved[move.new] = executor.run(move.plan, block) if move.plan.steps else block
    return moved


__all__ = ["COMMON_AXIS", "Move", "Reshard", "common_mesh", "move_blocks", "on_mesh", "plan_moves",
           "target_plan"]
