"""The one way to reach an `ir.Operation`, a value's producer, and the ops nested in an op.

The bindings hand an op out as an `ir.Operation` or as a typed view (`ir.OpView`: `linalg.MatmulOp`, a value's
`.owner`), and a module as an `ir.Module`; names, attributes, identity and walking want the `ir.Operation`.
Every stage gets it with `as_op`, a value's producer with `defining_op`, and the ops nested in one with
`walk_ops` / `nested_ops` (collected first, so a caller may rewrite the IR while it iterates), and a copy of
one with renamed operands with `clone_mapped`.
"""

from __future__ import annotations

from collections.abc import Iterator

from mlir import ir


def as_op(x):
    """The `ir.Operation` behind an op view, an operation or a module; anything else (None, a block) as it is."""
    return x.operation if isinstance(x, (ir.OpView, ir.Module)) else x


def defining_op(value: ir.Value) -> ir.Operation | None:
    """The op producing `value`, or None for a block argument."""
    owner = value.owner
    return None if isinstance(owner, ir.Block) else owner.operation


def walk_ops(root, name: str | None = None) -> Iterator[ir.Operation]:
    """The ops nested in `root` (an op, a view or a module), `root` first, in pre-order; only those named `name`
    when given. Collected eagerly, so callers may change the IR while iterating. An op of another copy of the
    bindings (torch-mlir's `torch_mlir.ir`, whose `walk` takes its own enums) is walked region by region."""
    found: list = []
    root = getattr(root, "operation", root)

    def visit(op) -> ir.WalkResult:
        if name is None or op.name == name:
            found.append(op.operation)
        return ir.WalkResult.ADVANCE

    if isinstance(root, ir.Operation):
        root.walk(visit, ir.WalkOrder.PRE_ORDER)
    else:
        _walk_foreign(root, visit)
    return iter(found)


def nested_ops(root) -> list[ir.Operation]:
    """The ops inside `root`, in pre-order, without `root` itself."""
    return list(walk_ops(root))[1:]


def map_locations(root, change) -> None:
    """Give every op nested in `root` (itself included) and every block argument the location `change` makes of
    its own (a parser's buffer name replaced by the file's, torch's frames by the user's)."""
    for op in walk_ops(root):
        op.location = change(op.location)
        for region in op.regions:
            for block in region.blocks:
                for argument in block.arguments:
                    argument.set_location(change(argument.location))


def clone_mapped(op: ir.Operation, mapping: dict) -> ir.Operation:
    """Clone `op` at the current insertion point with the operands `mapping` renames renamed; `mapping` gains
    its results (old -> clone's), so a run of ops cloned in order reads its own clones."""
    clone = op.clone()
    for i, operand in enumerate(clone.operands):
        if operand in mapping:
            clone.operands[i] = mapping[operand]
    for old, new in zip(op.results, clone.results):
        mapping[old] = new
    return clone


def _walk_foreign(op, visit) -> None:
    visit(op)
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                _walk_foreign(inner.operation, visit)


__all__ = ["as_op", "clone_mapped", "defining_op", "map_locations", "nested_ops", "walk_ops"]
