"""A tiled dim rotated by whole blocks, partitioned as one `slicer.permute`: each device receives the block it
takes from the device that holds it (ring attention's keys and values moving one step around the axis,
`frontends/decomp_ring.py`).

A rotation (`propagation/rotations.py`: a concat of slices of one source, element i of the result element
(i + t) mod N of the source) whose source is tiled on the rotated dim over axes of n devices (blocks of N/n,
none padded), t a multiple of N/n: the device at block index i needs the block at index (i + t / (N/n)) mod n,
one permute of a block; the result is typed as its source, and its slices and concat are erased. Any other
rotation is partitioned op by op, as before.
"""

from __future__ import annotations

import numpy as np
from mlir import ir

from slicer.core.names import DIST_ATTR
from slicer.propagation.rotations import Rotation
from slicer.redistribution import DistType, Permute

from .dist_types import dist_text, local_type
from .emit_collectives import PlanEmitter


def rotation_pairs(mesh, t: DistType, dim: int, shift_blocks: int) -> tuple[tuple[int, int], ...]:
    """(sender, receiver) linear ranks: the device at block index i of `dim` receives block i + shift_blocks
    (mod the blocks) from the device that holds it, with the same coordinates on the other axes."""
    axes = t.dims[dim]
    shape = mesh.shape
    coords = np.array(np.unravel_index(np.arange(mesh.device_count), shape)).T
    index, count = np.zeros(mesh.device_count, dtype=np.int64), 1
    for axis in axes:
        size = mesh.size(axis)
        index, count = index * size + coords[:, mesh.axis_index(axis)], count * size
    pairs = []
    for receiver in range(mesh.device_count):
        wanted = (index[receiver] + shift_blocks) % count
        sender_coords = coords[receiver].copy()
        rest = int(wanted)
        for axis in reversed(axes):
            size = mesh.size(axis)
            sender_coords[mesh.axis_index(axis)] = rest % size
            rest //= size
        sender = int(np.ravel_multi_index(tuple(sender_coords), shape))
        if sender != receiver:
            pairs.append((sender, receiver))
    return tuple(pairs)


def partition_rotation(partitioner, rotation: Rotation, context: frozenset[str]) -> bool:
    """Partition `rotation` as one permute of its source's blocks when they allow it (module docstring); False,
    nothing done, otherwise. `partitioner` is the function's `spmd.conversion.PartitionState`."""
    p = partitioner
    entry = p.lookup(rotation.source)
    if entry is None or entry.pads or entry.context != context or any(a in context for a in entry.type.dims[
            rotation.dim]):
        return False
    t, mesh = entry.type, p.mesh
    axes = t.dims[rotation.dim]
    if not axes or t.partial or t.shape[rotation.dim] != entry.shape[rotation.dim]:
        return False
    count = int(np.prod([mesh.size(a) for a in axes]))
    block = t.shape[rotation.dim] // count
    if t.shape[rotation.dim] % count or rotation.shift % block:
        return False
    pairs = rotation_pairs(mesh, t, rotation.dim, rotation.shift // block)
    result = rotation.concat.results[0]
    element = ir.RankedTensorType(result.type).element_type
    where = ir.Location.name(f"permute: the blocks of dim {rotation.dim} rotated by {rotation.shift // block} over "
                             f"[{','.join(axes)}]; source: {entry.origin}",
                             childLoc=ir.Location.fused([rotation.concat.location, entry.loc]))
    local = entry.local
    if pairs:
        with ir.InsertionPoint(rotation.concat):
            emitter = PlanEmitter(mesh, p.grid, p.coords)
            local = emitter.emit_step(entry.local, Permute(pairs, t), local_type(t, mesh, element), where)
        local.owner.attributes[DIST_ATTR] = ir.ArrayAttr.get([ir.StringAttr.get(dist_text(t, context))])
    origin = f"'{rotation.concat.name}' (dim {rotation.dim} rotated by whole blocks) of {entry.origin}"
    p.env[result] = type(entry)(local, t, context, origin, rotation.concat.location, entry.logical,
                                tactic=entry.tactic)
    p.erase += [*rotation.chain, rotation.concat]
    return True


__all__ = ["partition_rotation", "rotation_pairs"]
