"""Small IR queries the propagation laws share (ancestry, purity, zero values)."""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, builtin, linalg, tensor

from slicer.core.capsules import OPERATION_CAPSULE, capsule_pointer
from slicer.core.errors import InternalError
from slicer.core.names import LINALG_PREFIX, LOOP, RANGE_PRODUCT, SLICE, VALUE_ATTR
from slicer.core.operations import as_op, defining_op
from slicer.dialect import Action, LoopOp, RangeType, SliceOp, TileAction

# Ops on tensors with value semantics: erasable when unused, movable when their inputs allow.
PURE_PREFIXES = (LINALG_PREFIX, "tensor.", "arith.", "math.", SLICE, LOOP, RANGE_PRODUCT)


def op_id(op: ir.Operation) -> int:
    """The address of `op`: its identity while it lives. (The bindings' `hash(op)` is not an identity: it
    changes when the op's operands do, so ops cannot be dictionary keys across rewrites.) An OpView's
    capsule is its operation's: no `as_op` needed (called about a million times per training step)."""
    return capsule_pointer(op._CAPIPtr, OPERATION_CAPSULE)


def result_index(value: ir.Value) -> int:
    return ir.OpResult(value).result_number


def loop_range(loop: LoopOp) -> RangeType:
    """The range of a loop the laws rewrite: a well-formed `slicer.loop` always ranges over a `!slicer.range`."""
    found = loop.range
    if found is None:
        raise InternalError(f"'{LOOP}' whose body argument is not a range: {loop.range_arg.type}")
    return found


def loop_action(loop: LoopOp) -> Action:
    """The action of a loop the laws rewrite: a well-formed `slicer.loop` always carries one."""
    found = loop.action
    if found is None:
        raise InternalError(f"'{LOOP}' without a loop action (tile<d> or sum): {loop.operation.attributes}")
    return found


def tile_dim(loop: LoopOp) -> int:
    """The dim a tile loop concatenates its blocks along (a loop `tile_loop_of` found: its action is a tile)."""
    action = loop_action(loop)
    if not isinstance(action, TileAction):
        raise InternalError(f"'{LOOP}' with action {action} where a tile loop was expected")
    return action.dim


def slice_range(view: SliceOp) -> RangeType:
    """The range of a slice the laws rewrite: a well-formed `slicer.slice` takes a `!slicer.range`."""
    found = view.range
    if found is None:
        raise InternalError(f"'{SLICE}' whose range operand is not a range: {view.range_value.type}")
    return found


def ancestors(op: ir.Operation) -> list[ir.Operation]:
    """Enclosing ops, innermost first (up to, excluding, the module)."""
    found, parent = [], op.parent
    while parent is not None and parent.name != builtin.ModuleOp.OPERATION_NAME:
        found.append(as_op(parent))
        parent = parent.parent
    return found


def loops_around(op: ir.Operation, function: ir.Operation) -> list[ir.Operation]:
    """The ops around `op` inside `function` (its ancestors up to, without, the function and the module)."""
    return [a for a in ancestors(op) if a != function and a.name != builtin.ModuleOp.OPERATION_NAME]


def enclosing_loops(op: ir.Operation) -> list[LoopOp]:
    return [LoopOp(p) for p in ancestors(op) if p.name == LOOP]


def enclosing_axes(op: ir.Operation) -> set[str]:
    axes: set[str] = set()
    for loop in enclosing_loops(op):
        if loop.range is not None:
            axes.update(loop.range.axes)
    return axes


def value_scope(value: ir.Value) -> ir.Operation | None:
    """The op whose region defines `value` (the op owning the block), or None at module level."""
    if isinstance(value, ir.BlockArgument):
        return as_op(value.owner.owner) if value.owner.owner is not None else None
    owner = defining_op(value)
    return as_op(owner.parent) if owner is not None and owner.parent is not None else None


def defined_inside(value: ir.Value, region_op: ir.Operation) -> bool:
    """Is `value` defined somewhere inside the regions of `region_op`?"""
    scope = value_scope(value)
    while scope is not None and scope.name != builtin.ModuleOp.OPERATION_NAME:
        if scope == region_op:
            return True
        scope = as_op(scope.parent) if scope.parent is not None else None
    return False


def captured_values(op: ir.Operation, limit: int | None = None) -> list[ir.Value]:
    """Operands of `op` and values its regions use from outside `op` (pre-order); with `limit`, the first
    `limit` of them only, found without walking the rest of the regions."""
    values = list(op.operands)[:limit]
    if not len(op.regions) or (limit is not None and len(values) >= limit):
        return values

    def take(value: ir.Value, _owner_id) -> bool:
        values.append(value)
        return limit is not None and len(values) >= limit

    walk_captured(op, take)
    return values


def walk_captured(op: ir.Operation, take, skip: set[int] | frozenset = frozenset()) -> None:
    """Call `take(value, owner_id)` for each value the regions of `op` use from outside `op`, in pre-order
    (`owner_id`: the `op_id` of the op defining the value or owning its block, None for none); stop when it
    returns True. The ops in `skip` (by address) are not entered: what they define counts as captured.

    One walk: the ops visited so far inside `op` (by address) define everything used inside that is not
    captured, since a definition comes before its uses in pre-order (SSA dominance); a block argument belongs
    to the op owning its block, visited before that block's ops. (Asking `defined_inside` of every operand walked
    up the parents for each: most of the propagation's time on a training step.)"""
    root = op_id(op)
    inside = {root}

    def visit(inner):
        inner_id = op_id(inner)
        if inner_id in skip:
            return ir.WalkResult.SKIP
        if inner_id != root:
            for operand in inner.operands:
                owner = operand.owner.owner if isinstance(operand, ir.BlockArgument) else operand.owner
                owner_id = None if owner is None else op_id(owner)
                if owner_id not in inside and take(operand, owner_id):
                    return ir.WalkResult.INTERRUPT
            inside.add(inner_id)
        return ir.WalkResult.ADVANCE

    op.walk(visit, ir.WalkOrder.PRE_ORDER)


def is_pure(op: ir.Operation) -> bool:
    return op.name.startswith(PURE_PREFIXES) and len(op.results) > 0


def is_unused(op: ir.Operation) -> bool:
    for result in op.results:
        for _ in result.uses:  # (the first use answers: no list of them all)
            return False
    return True


def is_zero_tensor(value: ir.Value) -> bool:
    """Is `value` known to be all zeros (a zero fill or a zero splat constant, the generic form of a fill as
    `linalg-generalize-named-ops` writes it, or a reshape of one)?"""
    op = defining_op(value)
    if op is None:
        return False
    if op.name == linalg.FillOp.OPERATION_NAME:
        return _is_zero_scalar(op.operands[0])
    if op.name == arith.ConstantOp.OPERATION_NAME:
        return _is_zero_attr(op.attributes[VALUE_ATTR])
    if op.name in (tensor.ExpandShapeOp.OPERATION_NAME, tensor.CollapseShapeOp.OPERATION_NAME):
        return is_zero_tensor(op.operands[0])
    if op.name == linalg.GenericOp.OPERATION_NAME and len(op.operands) == 1 and len(op.results) == 1:
        body = op.regions[0].blocks[0]
        ops = list(body.operations)
        return (
            len(ops) == 1
            and ops[0].operation.name == linalg.YieldOp.OPERATION_NAME
            and _is_zero_scalar(ops[0].operands[0])
        )
    return False


def _is_zero_scalar(value: ir.Value) -> bool:
    scalar = defining_op(value)
    return (
        scalar is not None
        and scalar.name == arith.ConstantOp.OPERATION_NAME
        and _is_zero_attr(scalar.attributes[VALUE_ATTR])
    )


def _is_zero_attr(attr: ir.Attribute) -> bool:
    if isinstance(attr, ir.FloatAttr):
        return attr.value == 0.0
    if isinstance(attr, ir.IntegerAttr):
        return attr.value == 0
    if isinstance(attr, ir.DenseElementsAttr) and attr.is_splat:
        return _is_zero_attr(attr.get_splat_value())
    return False


def equivalent(a: ir.Operation, b: ir.Operation, mapping: dict | None = None) -> bool:
    """Do `a` and `b` compute the same thing? Same op, attributes, result types and operands (an operand of
    `a` defined inside the ops compared so far must correspond to `b`'s by `mapping`, any other must be the
    very same value), and equivalent regions, block by block and op by op. Locations are ignored.

    Upstream CSE compares regions like this too (OperationEquivalence), but it leaves the slicer dialect's
    ops alone: IRDL-defined ops carry no side-effect information, so it cannot know they are pure."""
    mapping = {} if mapping is None else mapping
    if (a.name != b.name or len(a.operands) != len(b.operands) or len(a.results) != len(b.results)
            or len(a.regions) != len(b.regions)):
        return False
    # The cheap tests first (operands by identity, counts): most pairs asked differ there, and reading the
    # attributes or the ops of a region through the bindings costs more.
    for va, vb in zip(a.operands, b.operands):
        if mapping.get(va, va) != vb:
            return False
    if any(ra.type != rb.type for ra, rb in zip(a.results, b.results)):
        return False
    if len(a.attributes) != len(b.attributes):
        return False
    attrs_a, attrs_b = _attributes(a), _attributes(b)
    if attrs_a.keys() != attrs_b.keys() or any(attrs_a[k] != attrs_b[k] for k in attrs_a):
        return False
    for region_a, region_b in zip(a.regions, b.regions):
        blocks_a, blocks_b = list(region_a.blocks), list(region_b.blocks)
        if len(blocks_a) != len(blocks_b):
            return False
        for block_a, block_b in zip(blocks_a, blocks_b):
            if (len(block_a.operations) != len(block_b.operations)
                    or [x.type for x in block_a.arguments] != [x.type for x in block_b.arguments]):
                return False
            mapping.update(zip(block_a.arguments, block_b.arguments))
            ops_a, ops_b = [as_op(o) for o in block_a.operations], [as_op(o) for o in block_b.operations]
            if len(ops_a) != len(ops_b):
                return False
            for inner_a, inner_b in zip(ops_a, ops_b):
                if not equivalent(inner_a, inner_b, mapping):
                    return False
                mapping.update(zip(inner_a.results, inner_b.results))
    return True


def _attributes(op: ir.Operation) -> dict[str, ir.Attribute]:
    attrs = op.attributes
    return {attrs[i].name: attrs[i].attr for i in range(len(attrs))}


class BlockOrder:
    """Sort key for ops of one block, in block order (MLIR caches the order: each comparison is O(1)
    amortized)."""

    __slots__ = ("op",)

    def __init__(self, op: ir.Operation):
        self.op = op

    def __lt__(self, other: BlockOrder) -> bool:
        return self.op.is_before_in_block(other.op)
