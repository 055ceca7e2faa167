"""Whole-mesh simulator: executes a plan on real numpy data for every device, in one process.

``initial_blocks`` lays a global array out as a type prescribes (for partial-sum axes each device gets a
random contribution, identical across replicas, such that the contributions of a group sum to the true
value); ``simulate_blocks`` runs each collective on the list of blocks (indexed by device rank);
``simulate`` does both and checks that every device ends with exactly its target block (for a target with
partial axes: that each group's contributions sum to it). This is the semantic reference of the plans and
of the MPI executor.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .steps import AllGather, AllReduce, AllSlice, AllToAll, Permute, ReduceScatter, Step
from slicer.core.errors import RedistributionError
from .layout import Layout
from slicer.core.mesh import Mesh
from . import subaxes
from .types import DistType, numpy_dtype


def block_slices(layout: Layout, t: DistType, rank: int) -> tuple[slice, ...]:
    return tuple(slice(int(s[rank]), int(s[rank]) + n) for s, n in layout.block_ranges(t))


def groups(layout: Layout, axes: tuple[str, ...]) -> np.ndarray:
    """Rows of device ranks, one row per group over ``axes``, each row in group-index order."""
    k = subaxes.group_size(layout.mesh, axes)
    order = np.lexsort((layout.group_index(axes), layout.group_key(axes)))
    return order.reshape(-1, k)


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
    return [np.require(parts[int(pidx[r])][block_slices(layout, t, r)], requirements="C") for r in range(mesh.device_count)]


def _split(block: np.ndarray, axis: int, k: int) -> list[np.ndarray]:
    return np.split(block, k, axis=axis)


def run_step(layout: Layout, step: Step, blocks: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Execute one collective on the rank-indexed list of blocks."""
    n = layout.device_count
    out: list = [None] * n
    if isinstance(step, Permute):
        source = step.source_of(n)
        return [blocks[int(source[r])] for r in range(n)]
    for row in groups(layout, step.mesh_axes):
        k = len(row)
        if isinstance(step, AllSlice):
            for j, r in enumerate(row):
                out[r] = np.ascontiguousarray(_split(blocks[r], step.slice_dim, k)[j])
        elif isinstance(step, AllGather):
            whole = np.concatenate([blocks[r] for r in row], axis=step.gather_dim)
            for r in row:
                out[r] = whole
        elif isinstance(step, AllToAll):
            # chunk j of every member goes to the member whose index over the split order is j
            chunk = layout.group_index(step.split_order)[row]
            pieces = [_split(blocks[r], step.split_dim, k) for r in row]
            for j, r in enumerate(row):
                out[r] = np.concatenate([pieces[i][chunk[j]] for i in range(k)], axis=step.concat_dim)
        elif isinstance(step, AllReduce):
            total = np.sum([blocks[r] for r in row], axis=0, dtype=blocks[row[0]].dtype)
            for r in row:
                out[r] = total
        elif isinstance(step, ReduceScatter):
            total = np.sum([blocks[r] for r in row], axis=0, dtype=blocks[row[0]].dtype)
            chunks = _split(total, step.scatter_dim, k)
            for j, r in enumerate(row):
                out[r] = np.ascontiguousarray(chunks[j])
        else:  # pragma: no cover - exhaustive over Step
            raise RedistributionError(f"unknown step {step!r}")
    return out


def simulate_blocks(plan, blocks: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run every step of ``plan`` on the rank-indexed list of source blocks."""
    layout = Layout.get(plan.mesh, plan.src.shape)
    blocks = list(blocks)
    for step, before, after in zip(plan.steps, plan.trace.types, plan.trace.types[1:]):
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
