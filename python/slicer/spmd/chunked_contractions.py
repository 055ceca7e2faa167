"""Collective matmul (XLA's windowed einsum, torchtitan's async tensor parallel): a contraction whose partial
sums go to an all_reduce or a reduce_scatter, split into chunks along a parallel dim of its output, so that
each chunk's collective is in flight while the next chunk computes.

    %p = linalg.matmul ins(%a, %w) outs(%init)           %p0 = linalg.matmul ins(%a[0:M/2], %w) ...
    %r = shard.all_reduce %p                     ->      %r0 = shard.all_reduce %p0
                                                          %p1 = linalg.matmul ins(%a[M/2:M], %w) ...
                                                          %r1 = shard.all_reduce %p1
                                                          %r  = insert_slice %r0, %r1 into tensor.empty

The kernel graph is cut at every collective, so chunk `i + 1` is a kernel of its own that the runtime runs
while chunk `i`'s collective is in flight (`runtime/execution/executor.py`, `schedule`). Each element is still summed by
one collective over the same group, so the results are the same bits. The chunks are ordinary linalg on
smaller shapes (their kernels are the same GEMM code); the price is a copy of the result (the insert_slices),
the operands that do not have the chunked dim read once per chunk, and a kernel call and collective per chunk.

Whether and how much to split is the cost model's call (`choose_chunks`): the collective's time from the
redistribution cost model, the contraction's from `KERNEL_FLOPS`, the extra copies from `MEMORY_BANDWIDTH`;
2 to `MAX_CHUNKS` chunks, only where the estimate drops by more than `MIN_GAIN` (never for tiny tensors,
where latency dominates).
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral

import numpy as np
from mlir import ir
from mlir.dialects import linalg, tensor

from slicer.core import environment
from slicer.core.errors import InternalError, OptionError
from slicer.core.linalg_facts import indexing_maps, input_count, is_linalg_op, projected_dims
from slicer.core.names import ALL_REDUCE, CHUNK_ATTR, REDUCE_SCATTER, SCATTER_AXIS_ATTR, SPMD_MESH_ATTR
from slicer.core.operations import defining_op
from slicer.dialect import grids
from slicer.redistribution import CostModel

from .overlap_ir import (
    KERNEL_FLOPS,
    KERNEL_OVERHEAD,
    MEMORY_BANDWIDTH,
    collective_seconds,
    dist_of,
    group_of,
    set_dist,
    tensor_bytes,
)

MAX_CHUNKS = 4
MIN_GAIN = 50e-6  # seconds the estimate must drop by (and 2% of it) for a split to be made


def chunks_setting(setting: int | str | None = None) -> int | None:
    """What `slicer.compile(collective_matmul=setting)` asks for: None (off), 0 (the cost model decides) or a
    forced chunk count. `setting`: "auto" (or True), "off" (or False, 0, or 1: one chunk is the whole
    contraction), or a chunk count >= 2; None: the default, `$SLICER_COLLECTIVE_MATMUL` (auto when unset)."""
    source = "collective_matmul"
    if setting is None:
        setting, source = environment.switch(environment.COLLECTIVE_MATMUL), environment.COLLECTIVE_MATMUL.name
    if isinstance(setting, bool):
        setting = "auto" if setting else "off"
    if setting == "off" or (isinstance(setting, Integral) and setting in (0, 1)):
        return None
    if setting == "auto":
        return 0
    if isinstance(setting, Integral) and setting >= 2:
        return int(setting)
    raise OptionError(f"{source}={setting!r}: use 'auto' (the cost model decides), 'off' (or 0) or a chunk count "
                      ">= 2")


@dataclass(frozen=True)
class ChunkEstimate:
    """One way to run a contraction and its collective: `chunks` pieces, estimated `seconds` in all."""

    chunks: int
    seconds: float


def pipeline_seconds(compute: float, comm: float, chunks: int, extra: float) -> float:
    """Time of `chunks` chunks, each computing `compute / chunks` and then moving `comm` seconds' worth of
    collective while the next chunk computes; the last chunk's collective is exposed. `extra`: the split's
    own costs (copies, calls)."""
    per = compute / chunks
    return per + (chunks - 1) * max(per, comm) + comm + extra


def choose_chunks(compute: float, comm_of, extra_of, candidates) -> ChunkEstimate:
    """The best of running whole (1 chunk) or in one of `candidates` chunk counts: `comm_of(k)` is the
    collective time of one of `k` chunks, `extra_of(k)` what the split costs besides. 1 unless a split saves
    more than `MIN_GAIN` and 2% of the whole."""
    whole = ChunkEstimate(1, compute + comm_of(1))
    best = whole
    for k in candidates:
        estimate = ChunkEstimate(k, pipeline_seconds(compute, comm_of(k), k, extra_of(k)))
        if estimate.seconds < best.seconds:
            best = estimate
    saved = whole.seconds - best.seconds
    return best if saved > max(MIN_GAIN, 0.02 * whole.seconds) else whole


@dataclass(frozen=True)
class ChunkCandidate:
    """A contraction `producer` whose only use is the collective `collective`, splittable along output dim
    `dim` (loop dim `loop`)."""

    producer: ir.Operation
    collective: ir.Operation
    dim: int
    loop: int


def _projection(amap: ir.AffineMap) -> tuple[int, ...]:
    """The loop dims of a chunk candidate's indexing map (`candidate` checks every map is a projection)."""
    dims = projected_dims(amap)
    if dims is None:
        raise InternalError(f"a chunk candidate's indexing map {amap} is not a projection")
    return dims


def _loop_sizes(op: ir.Operation) -> dict[int, int] | None:
    sizes: dict[int, int] = {}
    for operand, amap in zip(op.operands, indexing_maps(op)):
        dims = projected_dims(amap)
        if dims is None or not isinstance(operand.type, ir.RankedTensorType):
            return None
        for position, loop in enumerate(dims):
            sizes[loop] = ir.RankedTensorType(operand.type).shape[position]
    return sizes


def candidate(collective: ir.Operation) -> ChunkCandidate | None:
    """The split `collective`'s input allows, or None: the input is the one result of a linalg contraction
    (a loop dim its output does not index) used only here, every indexing map a projection, and some output
    dim (not the scattered one) a parallel loop dim the split can cut; of those, the dim whose cut re-reads
    the fewest operand bytes (the operands without it are read once per chunk), the outermost on ties."""
    source = collective.operands[0]
    producer = defining_op(source)
    if producer is None or not is_linalg_op(producer) or len(producer.results) != 1:
        return None
    if len(list(source.uses)) != 1 or not isinstance(source.type, ir.RankedTensorType):
        return None
    maps = indexing_maps(producer)
    sizes = _loop_sizes(producer)
    out_dims = projected_dims(maps[-1]) if maps else None
    if sizes is None or out_dims is None or len(maps) != len(producer.operands) or len(producer.operands) < 2:
        return None
    if set(sizes) <= set(out_dims):
        return None  # no reduced loop: not a contraction
    scattered = ir.IntegerAttr(collective.attributes[SCATTER_AXIS_ATTR]).value \
        if collective.name == REDUCE_SCATTER else None
    inputs = producer.operands[:input_count(producer)]
    best = None
    for dim, loop in enumerate(out_dims):
        if dim == scattered or sizes[loop] < 2:
            continue
        reread = sum(tensor_bytes(v) for v, m in zip(inputs, maps) if loop not in _projection(m))
        if best is None or reread < best[0]:
            best = (reread, dim, loop)
    return None if best is None else ChunkCandidate(producer, collective, best[1], best[2])


def decide(found: ChunkCandidate, grid_table: dict, model: CostModel, forced: int) -> int:
    """How many chunks to cut `found` into (1: leave it): `forced` where it divides the dim, else the model's
    choice among the counts up to `MAX_CHUNKS` that divide it."""
    size = ir.RankedTensorType(found.producer.results[0].type).shape[found.dim]
    if forced:
        return forced if size % forced == 0 else 1
    candidates = [k for k in range(2, MAX_CHUNKS + 1) if size % k == 0]
    sizes = _loop_sizes(found.producer)
    if sizes is None:
        raise InternalError("a chunk candidate whose indexing maps are not projections (candidate() checks them)")
    flops = 2.0 * float(np.prod(list(sizes.values()), dtype=np.float64))
    result = found.producer.results[0]
    inputs = found.producer.operands[:input_count(found.producer)]
    maps = indexing_maps(found.producer)
    reread = sum(tensor_bytes(v) for v, m in zip(inputs, maps) if found.loop not in _projection(m))
    whole = collective_seconds(found.collective, grid_table, model)
    latency = collective_seconds_latency(found.collective, grid_table, model)

    def comm_of(k: int) -> float:
        return latency + (whole - latency) / k

    def extra_of(k: int) -> float:
        copies = tensor_bytes(result) + (k - 1) * reread  # the assembly, and operands packed again
        return copies / MEMORY_BANDWIDTH + 2 * (k - 1) * KERNEL_OVERHEAD

    return choose_chunks(flops / KERNEL_FLOPS, comm_of, extra_of, candidates).chunks


def collective_seconds_latency(op: ir.Operation, grid_table: dict, model: CostModel) -> float:
    """The latency part of `collective_seconds` (the time of the same collective moving nothing)."""
    axes, group = group_of(op, grid_table)
    return model.seconds(axes, 0) if group > 1 else 0.0


def _slice(value: ir.Value, dim: int, offset: int, size: int) -> ir.Value:
    t = ir.RankedTensorType(value.type)
    shape = [size if d == dim else n for d, n in enumerate(t.shape)]
    out = tensor.extract_slice(ir.RankedTensorType.get(shape, t.element_type), value, [], [], [],
                               [offset if d == dim else 0 for d in range(t.rank)], shape, [1] * t.rank)
    set_dist(defining_op(out), dist_of(value))
    return out


def _chunk_init(init: ir.Value, dim: int, offset: int, size: int) -> ir.Value:
    """The output operand of one chunk: a fill of a `tensor.empty` made again at the chunk's size, else a
    slice of the init."""
    fill = defining_op(init)
    if fill is None or fill.name != linalg.FillOp.OPERATION_NAME:
        return _slice(init, dim, offset, size)
    empty = defining_op(fill.operands[1])
    if empty is None or empty.name != tensor.EmptyOp.OPERATION_NAME or empty.operands:
        return _slice(init, dim, offset, size)
    t = ir.RankedTensorType(init.type)
    new_empty = tensor.empty([size if d == dim else n for d, n in enumerate(t.shape)], t.element_type)
    set_dist(defining_op(new_empty), dist_of(init))
    filled = linalg.fill(fill.operands[0], outs=[new_empty])
    set_dist(defining_op(filled), dist_of(init))
    return filled


def split(found: ChunkCandidate, chunks: int) -> None:
    """Rewrite `found` into `chunks` contraction + collective pairs and the assembly of their results (before
    the collective, in place of both ops)."""
    producer, collective, dim, loop = found.producer, found.collective, found.dim, found.loop
    maps = indexing_maps(producer)
    n_in = input_count(producer)
    size = ir.RankedTensorType(producer.results[0].type).shape[dim] // chunks
    out_type = ir.RankedTensorType(collective.results[0].type)
    pieces = []
    with ir.InsertionPoint(collective), collective.location:
        for i in range(chunks):
            operands = []
            for j, (operand, amap) in enumerate(zip(producer.operands, maps)):
                dims = _projection(amap)
                if j >= n_in:
                    operands.append(_chunk_init(operand, dims.index(loop), i * size, size))
                elif loop in dims:
                    operands.append(_slice(operand, dims.index(loop), i * size, size))
                else:
                    operands.append(operand)
            part = producer.clone(ir.InsertionPoint(collective))
            for j, operand in enumerate(operands):
                part.operands[j] = operand
            chunk_type = ir.RankedTensorType(operands[-1].type)
            part.results[0].set_type(chunk_type)
            reduced = collective.clone(ir.InsertionPoint(collective))
            reduced.operands[0] = part.results[0]
            reduced.attributes[CHUNK_ATTR] = ir.UnitAttr.get()
            shape = [size if d == dim else n for d, n in enumerate(out_type.shape)]
            reduced.results[0].set_type(ir.RankedTensorType.get(shape, out_type.element_type))
            pieces.append(reduced.results[0])
        whole = tensor.empty(list(out_type.shape), out_type.element_type)
        text = dist_of(collective.results[0])
        set_dist(defining_op(whole), text)
        for i, piece in enumerate(pieces):
            shape = ir.RankedTensorType(piece.type).shape
            whole = tensor.insert_slice(piece, whole, [], [], [],
                                        [i * size if d == dim else 0 for d in range(len(shape))],
                                        list(shape), [1] * len(shape))
            set_dist(defining_op(whole), text)
    collective.results[0].replace_all_uses_with(whole)
    collective.erase()
    producer.erase()


def collective_matmul(module: ir.Operation, *, chunks: int = 0, model: CostModel | None = None) -> int:
    """Split every contraction feeding an all_reduce or reduce_scatter in the SPMD functions of `module`
    where the cost model says it pays (`chunks` > 1: that many chunks wherever the dim divides). Returns how
    many contractions were split."""
    if chunks == 1 or chunks < 0:
        raise OptionError(f"chunks={chunks}: use 0 (the cost model decides) or a count >= 2")
    model = model or CostModel.default()
    grid_table = grids(module)
    done = 0
    for func in module.regions[0].blocks[0].operations:
        func = func.operation
        if SPMD_MESH_ATTR not in func.attributes:
            continue
        collectives = [op.operation for op in func.regions[0].blocks[0].operations
                       if op.operation.name in (ALL_REDUCE, REDUCE_SCATTER)]
        for collective in collectives:
            found = candidate(collective)
            if found is None:
                continue
            count = decide(found, grid_table, model, chunks)
            if count > 1:
                split(found, count)
                done += 1
    return done
