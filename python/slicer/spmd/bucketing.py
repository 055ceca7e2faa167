"""Gradient bucketing (PyTorch DDP's buckets): several all_reduces of the same kind combined into one.

A data-parallel training step all_reduces every gradient on its own; most are small (biases, norms), so each
costs the collective's latency and a start and a wait of the runtime. Here all_reduces over the same grid
axes, with the same reduction and element type, are taken in the order their inputs are computed and packed
greedily into buckets of at most `bucket_bytes` (from the cost model: big enough that the latency is a small
part of a bucket's time, capped like DDP's 25 MB so the first bucket starts early in the backward pass):

    %f = tensor.empty [n0 + n1 + ...]       each input flattened (collapse_shape) and inserted at its offset
    %r = shard.all_reduce %f                right after the bucket's last input is computed
    %gi = expand_shape(extract_slice %r[oi : oi + ni])    right before the first use of member i's result

The bucket's collective is placed right after the op computing its last input, so the kernel graph is cut
there and the runtime starts it while the rest of the backward pass computes. Every element is reduced by one
collective over the same group as before (the same sum order per element), so results are the same bits.

Only members whose blocks are whole (untiled dims: data-parallel gradients) are bucketed; a member whose
result is used before the bucket's last input exists stays alone (the bucket could not start in time).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from numbers import Integral
from typing import Any

from mlir import ir
from mlir.dialects import tensor

from slicer.core import environment
from slicer.core.errors import OptionError
from slicer.core.names import (
    ALL_REDUCE,
    CHUNK_ATTR,
    GRID_ATTR,
    GRID_AXES_ATTR,
    REDUCE_SCATTER,
    REDUCTION_ATTR,
    SCATTER_AXIS_ATTR,
    SPMD_MESH_ATTR,
)
from slicer.core.operations import as_op, defining_op
from slicer.dialect import grids
from slicer.redistribution import CostModel

from .overlap_ir import dist_of, group_of, set_dist, tensor_bytes, top_level

LATENCY_MULTIPLE = 25  # a full bucket moves this many latencies' worth of bytes (latency: 4% of its time)
MIN_BUCKET = 256 << 10
MAX_BUCKET = 25 << 20  # DDP's default
KINDS = (ALL_REDUCE, REDUCE_SCATTER)


def bucket_bytes(model: CostModel) -> int:
    """The bucket size the cost model gives: `LATENCY_MULTIPLE` latencies' worth of bytes at its bandwidth,
    between `MIN_BUCKET` and `MAX_BUCKET`."""
    return int(min(MAX_BUCKET, max(MIN_BUCKET, LATENCY_MULTIPLE * model.latency * model.bandwidth)))


def bucket_setting(setting: int | str | None = None) -> int | None:
    """What `slicer.compile(buckets=setting)` asks for: None (off), 0 (the cost model's size) or a size in bytes.
    `setting`: "auto" (or True), "off" (or False, or 0), or a bucket size in bytes; None: the default,
    `$SLICER_BUCKETS` (auto when unset)."""
    source = "buckets"
    if setting is None:
        setting, source = environment.switch(environment.BUCKETS), environment.BUCKETS.name
    if isinstance(setting, bool):
        setting = "auto" if setting else "off"
    if setting == "off" or (isinstance(setting, Integral) and setting == 0):
        return None
    if setting == "auto":
        return 0
    if isinstance(setting, Integral) and setting > 0:
        return int(setting)
    raise OptionError(f"{source}={setting!r}: use 'auto' (the cost model's bucket size), 'off' (or 0) or a bucket "
                      "size in bytes")


@dataclass
class Bucket:
    """All_reduces combined into one, placed after op `ready` (an index in the function's block)."""

    members: list = field(default_factory=list)
    ready: int = -1
    size: int = 0
    after: ir.Operation | None = None  # the op at `ready` (None: the function's start)


def _dims_text(text: str) -> tuple[str, str]:
    """A `slicer.dist` text split into its dims part (`[[x],[]]`) and the rest (` partial=[y] varying=[x]`)."""
    depth = 0
    for i, char in enumerate(text):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth == 0:
            return text[:i + 1], text[i + 1:]
    return text, ""


def _whole_blocks(value: ir.Value) -> bool:
    text = dist_of(value)
    return text is not None and _dims_text(text)[0].replace("[]", "").replace(",", "") == "[]"


def _scattered_dim0(value: ir.Value) -> bool:
    """The block of a reduce_scatter's result: dim 0 tiled, every other dim whole."""
    text = dist_of(value)
    if text is None:
        return False
    dims = _dims_text(text)[0]
    head = dims[1:dims.index("]") + 1]
    return head != "[]" and dims[len(head) + 1:].replace("[]", "").replace(",", "") == "]"


def _key(op: ir.Operation) -> tuple | None:
    """What members of one bucket share (kind, grid, axes, reduction, element type), or None when `op` cannot
    join one: a scalar, a dynamic or tiled block, a reduce_scatter of another dim than 0, a chunk of a split
    contraction (`CHUNK_ATTR`)."""
    if CHUNK_ATTR in op.attributes:
        return None
    source = op.operands[0]
    t = source.type
    if not isinstance(t, ir.RankedTensorType) or not t.has_static_shape or t.rank == 0 or not _whole_blocks(source):
        return None
    if op.name == REDUCE_SCATTER:
        if ir.IntegerAttr(op.attributes[SCATTER_AXIS_ATTR]).value != 0 or not _scattered_dim0(op.results[0]):
            return None
    elif not _whole_blocks(op.results[0]):
        return None
    owner = defining_op(source)
    if owner is not None and owner.name in KINDS:
        return None  # its producer may itself be bucketed away
    reduction = str(op.attributes[REDUCTION_ATTR]) if REDUCTION_ATTR in op.attributes else ""
    return (op.name, str(op.attributes[GRID_ATTR]), str(op.attributes[GRID_AXES_ATTR]), reduction, str(t.element_type))


def greedy_buckets(members, cap: int) -> list[list]:
    """`members`, each (ready, order, first use, bytes, item), packed in the order (ready, order) into buckets: a
    member joins the open bucket while the bucket stays within `cap` bytes and no member's result is used before the
    new member's input exists (every first use after its ready). The one rule of bucketing: `plan_buckets` applies it
    to the IR, the search's memory trace to its model of a program (`automatic/peak_memory.py`)."""
    buckets, current, size, first = [], list[Any](), 0, 0
    for member in sorted(members, key=lambda m: m[:2]):
        ready, _, use, nbytes, _ = member
        if current and not (size + nbytes <= cap and min(first, use) > ready):
            buckets.append(current)
            current = []
        size, first = (size + nbytes, min(first, use)) if current else (nbytes, use)
        current.append(member)
    return buckets + [current] if current else buckets


def plan_buckets(block: ir.Block, cap: int) -> list[Bucket]:
    """The buckets of the all_reduces of `block` (of 2 members or more), members in the order their inputs
    are computed: a member joins the open bucket while the bucket stays within `cap` bytes and no member's
    result is used before the new member's input exists."""
    ops = [op.operation for op in block.operations]
    position = {op: i for i, op in enumerate(ops)}

    def ready(op: ir.Operation) -> int:
        owner = defining_op(op.operands[0])
        return -1 if owner is None else position[top_level(owner, block)]

    def first_use(op: ir.Operation) -> int:
        return min((position[top_level(as_op(u.owner), block)] for u in op.results[0].uses),
                   default=len(ops))

    groups = defaultdict(list)
    for op in ops:
        if op.name in KINDS and (key := _key(op)) is not None:
            groups[key].append(op)
    buckets = []
    for members in groups.values():
        items = [(ready(op), position[op], first_use(op), tensor_bytes(op.operands[0]), op) for op in members]
        buckets += [Bucket([m[4] for m in group], max(m[0] for m in group), sum(m[3] for m in group))
                    for group in greedy_buckets(items, cap)]
    for bucket in buckets:
        bucket.after = ops[bucket.ready] if bucket.ready >= 0 else None
    return [b for b in buckets if len(b.members) > 1]


def _reshape(value: ir.Value, shape: list[int], text: str | None) -> ir.Value:
    """`value` (contiguous) reshaped to `shape` through its flat form (collapse, then expand); the last op gets
    the `slicer.dist` text `text` (the others stay inside the kernel that makes them)."""
    t = ir.RankedTensorType(value.type)
    if list(t.shape) == shape:
        return value
    if t.rank != 1:
        value = tensor.collapse_shape(ir.RankedTensorType.get([_count(t)], t.element_type), value,
                                      [list(range(t.rank))])
        if len(shape) == 1:  # the last op: its result may cross into another kernel
            set_dist(defining_op(value), text)
    if len(shape) == 1:
        return value
    out = tensor.expand_shape(ir.RankedTensorType.get(shape, t.element_type), value, [list(range(len(shape)))], [],
                              shape)
    set_dist(defining_op(out), text)
    return out


def _count(t: ir.RankedTensorType) -> int:
    n = 1
    for s in t.shape:
        n *= s
    return n


@dataclass(frozen=True)
class BucketShape:
    """How a bucket lays out its members: all_reduce: one flat row; reduce_scatter over `rows` devices: `rows`
    rows, each member's row block `i` (what device `i` keeps) in row `i` at the member's offset."""

    rows: int
    in_text: str  # the bucket input's `slicer.dist`
    out_text: str  # the bucket result's
    piece_text: str  # a member's flat piece of the result

    def shape(self, columns: int) -> list[int]:
        return [columns] if self.rows == 1 else [self.rows, columns]

    def out_shape(self, columns: int) -> list[int]:
        return [columns] if self.rows == 1 else [1, columns]


def _bucket_shape(first: ir.Operation, grid_table: dict) -> BucketShape:
    in_rest = _dims_text(dist_of(first.operands[0]))[1]
    out_dims, out_rest = _dims_text(dist_of(first.results[0]))
    if first.name == ALL_REDUCE:
        return BucketShape(1, "[[]]" + in_rest, "[[]]" + out_rest, "[[]]" + out_rest)
    head = out_dims[1:out_dims.index("]") + 1]
    return BucketShape(group_of(first, grid_table)[1], "[[],[]]" + in_rest, f"[{head},[]]" + out_rest,
                  f"[{head}]" + out_rest)


def rewrite(bucket: Bucket, block: ir.Block, grid_table: dict) -> None:
    """Replace the bucket's collectives by one over their inputs laid out side by side (after op
    `bucket.after`), and a slice of its result before each member's first use."""
    first = bucket.members[0]
    element = ir.RankedTensorType(first.operands[0].type).element_type
    bucket_shape = _bucket_shape(first, grid_table)
    total = sum(_count(ir.RankedTensorType(m.operands[0].type)) for m in bucket.members) // bucket_shape.rows
    anchor = ir.InsertionPoint.at_block_begin(block) if bucket.after is None else ir.InsertionPoint.after(bucket.after)
    offsets = []
    with anchor, first.location:
        whole = tensor.empty(bucket_shape.shape(total), element)
        set_dist(defining_op(whole), bucket_shape.in_text)
        offset = 0
        for member in bucket.members:
            columns = _count(ir.RankedTensorType(member.operands[0].type)) // bucket_shape.rows
            piece = _reshape(member.operands[0], bucket_shape.shape(columns), bucket_shape.in_text)
            at = [offset] if bucket_shape.rows == 1 else [0, offset]
            whole = tensor.insert_slice(piece, whole, [], [], [], at, bucket_shape.shape(columns), [1] * len(at))
            set_dist(defining_op(whole), bucket_shape.in_text)
            offsets.append((offset, columns))
            offset += columns
        reduced = first.clone()
        reduced.operands[0] = whole
        reduced.results[0].set_type(ir.RankedTensorType.get(bucket_shape.out_shape(total), element))
        set_dist(reduced, bucket_shape.out_text)
    for member, (offset, columns) in zip(bucket.members, offsets):
        _split_out(member, reduced.results[0], offset, columns, block, bucket_shape)


def _split_out(member: ir.Operation, whole: ir.Value, offset: int, columns: int, block: ir.Block,
               bucket_shape: BucketShape) -> None:
    """Member `member`'s result as a slice of the bucket's result `whole`, made right before its first use."""
    result = member.results[0]
    users = [top_level(as_op(u.owner), block) for u in result.uses]
    ops = [op.operation for op in block.operations]
    first = min(users, key=ops.index)
    t = ir.RankedTensorType(result.type)
    shape = bucket_shape.out_shape(columns)
    with ir.InsertionPoint(first), member.location:
        piece = tensor.extract_slice(ir.RankedTensorType.get(shape, t.element_type), whole, [], [], [],
                                     [offset] if len(shape) == 1 else [0, offset], shape, [1] * len(shape))
        set_dist(defining_op(piece), bucket_shape.out_text)
        piece = _reshape(piece, list(t.shape), dist_of(result))
    result.replace_all_uses_with(piece)
    member.erase()


def bucket_all_reduces(module: ir.Operation, *, cap: int = 0, model: CostModel | None = None) -> int:
    """Bucket the all_reduces, and the reduce_scatters of dim 0, of every SPMD function of `module` (`cap`
    bytes per bucket; 0: the cost model's `bucket_bytes`). Returns how many buckets were made."""
    if cap < 0:
        raise OptionError(f"bucket size {cap}: use 0 (the cost model's) or a number of bytes")
    cap = cap or bucket_bytes(model or CostModel.default())
    grid_table = grids(module)
    made = 0
    for func in module.regions[0].blocks[0].operations:
        func = func.operation
        if SPMD_MESH_ATTR not in func.attributes:
            continue
        block = func.regions[0].blocks[0]
        for bucket in plan_buckets(block, cap):
            rewrite(bucket, block, grid_table)
            made += 1
    return made
