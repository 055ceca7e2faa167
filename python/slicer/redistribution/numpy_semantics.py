"""Whole-mesh simulator: executes a plan on real numpy data for every device, in one process.

``initial_blocks`` lays a global array out as a type prescribes (for partial-sum axes each device gets a
random contribution, identical across replicas, such that the contributions of a group sum to the true
value); ``simulate_blocks`` runs each collective on the list of blocks (indexed by device rank; each step's
class defines what it does to them, `steps.Collective.numpy_blocks`);
``simulate`` does both and checks that every device ends with exactly its target block (for a target with
partial axes: that each group's contributions sum to it). This is the semantic reference of the plans and
of the MPI executor.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from slicer.core.errors import RedistributionError
from slicer.core.mesh import Mesh

from . import subaxes
from .layout import Layout, groups
from .steps import Step
from .types import DistType, numpy_dtype


def block_slices(layout: Layout, t: DistType, rank: int) -> tuple[slice, ...]:
    return tuple(slice(int(s[rank]), int(s[rank]) + n) for s, n in layout.block_ranges(t))


def _contributions(layout: Layout, t: DistType, global_array: np.ndarray, seed: int) -> list[np.ndarray]:
    count = subaxes.group_size(layout.mesh, t.partial)
    if count == 1:
        return [global_array]
    rng = np.random.default_rng(seed)
    extra = [rng.integers(-50, 50, size=global_array.shape).astype(global_array.dtype) for _ in range(count - 1)]
    first = global_array - sum(extra)
    return [first.astype(global_array.dtype)] + extra


def initial_blocks(mesh: Mesh, t: DistType, global_array: np.ndarray, *, seed: int = 0) -> list[np.ndarray]:
    """Every device's block of ``global_array`` laid out as ``t`` (rank-indexed list of copies)."""
    if tuple(global_array.shape) != t.shape:
        raise RedistributionError(f"array of shape {global_array.shape} does not have the shape {t.shape} of {t}")
    layout = Layout.get(mesh, t.shape)
    parts = _contributions(layout, t, global_array, seed)
    pidx = layout.group_index(t.partial)
    return [np.require(parts[int(pidx[r])][block_slices(layout, t, r)],
                       requirements="C") for r in range(mesh.device_count)]


def run_step(layout: Layout, step: Step, blocks: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Execute one collective on the rank-indexed list of blocks (its class's `numpy_blocks`)."""
    return step.numpy_blocks(layout, blocks)


def simulate_blocks(plan, blocks: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run every step of ``plan`` on the rank-indexed list of source blocks."""
    layout = Layout.get(plan.mesh, plan.src.shape)
    blocks = list(blocks)
    for step, _before, after in zip(plan.steps, plan.trace.types, plan.trace.types[1:]):
        blocks = run_step(layout, step, blocks)
        shape = after.local_shape(plan.mesh)
        if any(b.shape != shape for b in blocks):
            raise RedistributionError(f"{step.op} produced blocks of shape {blocks[0].shape}, its type {after} "
                                      f"says {shape}")
    return blocks


def mismatches(mesh: Mesh, dst: DistType, global_array: np.ndarray, blocks: Sequence[np.ndarray]) -> list[str]:
    """Devices whose final block is not their target block (empty list = correct)."""
    layout = Layout.get(mesh, dst.shape)
    bad = []
    if subaxes.group_size(mesh, dst.partial) > 1:
        for row in groups(layout, dst.partial):
            total = np.sum([blocks[r] for r in row], axis=0)
            if not np.array_equal(total, global_array[block_slices(layout, dst, int(row[0]))]):
                bad.append(f"partial sums of devices {list(map(int, row))} differ from their target block")
        return bad
    for r in range(mesh.device_count):
        if not np.array_equal(blocks[r], global_array[block_slices(layout, dst, r)]):
            bad.append(f"device {r} {mesh.coords(r)} does not hold its target block under {dst}")
    return bad


def simulate(plan, global_array: np.ndarray | None = None, *, seed: int = 0, check: bool = True) -> list[np.ndarray]:
    """Execute ``plan`` on ``global_array`` (default: distinct integers of the plan's dtype) for the whole
    mesh and return the final rank-indexed blocks; raise if a device does not end with its target block."""
    if global_array is None:
        size = int(np.prod(plan.src.shape, dtype=np.int64))
        global_array = (np.arange(size) % 2039).astype(numpy_dtype(plan.dtype)).reshape(plan.src.shape)
    blocks = simulate_blocks(plan, initial_blocks(plan.mesh, plan.src, global_array, seed=seed))
    if check:
        bad = mismatches(plan.mesh, plan.dst, global_array, blocks)
        if bad:
            raise RedistributionError(f"simulation of the plan {plan.src} -> {plan.dst} failed: " + "; ".join(bad[:3]))
    return blocks
