"""Rematerialisation (`slicer-remat`, docs/remat.md): the forward computation of chosen modules recomputed in
the backward pass instead of kept alive from the forward pass to its backward use.

Details: docs/module-notes.md, `spmd/rematerialize.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from mlir import ir
from mlir.dialects import arith, tensor
from mlir.dialects import func as func_d

from slicer.core.capsules import OPERATION_CAPSULE, capsule_pointer
from slicer.core.errors import InvalidTactic
from slicer.core.linalg_facts import indexing_maps, is_linalg_op, mentioned_dims
from slicer.core.names import ARG_NAME_ATTR, COLLECTIVE_OPS, REMAT_ATTR, REMAT_UNITS_ATTR, RES_ATTRS_ATTR
from slicer.core.operations import as_op, defining_op
from slicer.core.source_lines import module_path
from slicer.tactics.patterns import closest_hint, matches
from slicer.tactics.values import REMAT_POLICIES as POLICIES
from slicer.tactics.values import remat_keeps

from .overlap_ir import tensor_bytes, top_level

LOSS = "loss"
_NOT_HELD = (tensor.EmptyOp.OPERATION_NAME, arith.ConstantOp.OPERATION_NAME)
"""Ops whose results hold no activation (shapes, constants): not reported as saved."""
_MULTIPLIES = (arith.MulFOp.OPERATION_NAME, arith.MulIOp.OPERATION_NAME)


@dataclass
class Unit:
    """What remat does to one module instance (`blocks.0`)."""

    name: str
    recomputed: list[ir.Value] = field(default_factory=list)
    """Values the backward reads from a recomputation (their clones)."""
    saved: list[ir.Value] = field(default_factory=list)
    """Values of the unit the backward or its recomputation still reads from the forward pass (kept by the
    policy, outputs, collectives)."""
    cloned: int = 0
    """Ops cloned to recompute them."""

    @property
    def saved_bytes(self) -> int:
        """Bytes per device of the saved values (what the backward holds from the forward pass)."""
        return sum(_bytes(v) for v in self.saved)

    @property
    def recomputed_bytes(self) -> int:
        """Bytes per device of the recomputed values (no longer held from the forward pass to the backward)."""
        return sum(_bytes(v) for v in self.recomputed)


def _bytes(value: ir.Value) -> int:
    return tensor_bytes(value) if isinstance(value.type, ir.RankedTensorType) else 0


def _op_id(op) -> int:
    return capsule_pointer(as_op(op)._CAPIPtr, OPERATION_CAPSULE)


def _key(value: ir.Value) -> tuple:
    owner = defining_op(value)
    if owner is None:
        return ("arg", ir.BlockArgument(value).arg_number)
    return (_op_id(owner), ir.OpResult(value).result_number)


def _deep_operands(op: ir.Operation):
    """(owner op, operand index, value) of every operand of `op` and of the ops nested in it."""
    for i, value in enumerate(op.operands):
        yield op, i, value
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                yield from _deep_operands(as_op(inner))


def loss_index(func) -> int | None:
    """The position of the result named `loss`, or None."""
    attrs = as_op(func).attributes
    if RES_ATTRS_ATTR not in attrs:
        return None
    for i, entry in enumerate(ir.ArrayAttr(attrs[RES_ATTRS_ATTR])):
        entry = ir.DictAttr(entry)
        if ARG_NAME_ATTR in entry and ir.StringAttr(entry[ARG_NAME_ATTR]).value == LOSS:
            return i
    return None


def is_contraction(op: ir.Operation) -> bool:
    """A linalg op that reduces over a loop (one its result's map does not mention) and multiplies two operands
    (a matmul in any form: named, or generic)."""
    if not is_linalg_op(op) or not op.regions or not op.regions[0].blocks:
        return False
    maps = indexing_maps(op)
    kept = set().union(*(mentioned_dims(e) for e in maps[-1].results)) if maps else set()
    if not maps or len(kept) == maps[-1].n_dims:
        return False
    body = [as_op(o).name for o in op.regions[0].blocks[0].operations]
    tensors = [v for v in op.operands if isinstance(v.type, ir.RankedTensorType)]
    return any(n in _MULTIPLIES for n in body) and len(tensors) >= 3


def has_batch_dims(op: ir.Operation) -> bool:
    """Whether a loop dim of the linalg op `op` walks every operand and its result (a batch dim: attention's
    `q @ k^T` per head; a linear layer's matmul against a weight has none)."""
    dims = [set().union(*(mentioned_dims(e) for e in m.results)) for m in indexing_maps(op)]
    return bool(dims) and bool(set.intersection(*dims))


class _Function:
    """The facts of one function the rewrite reads: its top-level ops in order, which are forward, and who
    defines each value."""

    def __init__(self, func, loss: int):
        self.block = func.regions[0].blocks[0]
        self.ops = [as_op(o) for o in self.block.operations]
        self.position = {_op_id(op): i for i, op in enumerate(self.ops)}
        needed = self._forward(self.ops[-1].operands[loss])
        end = max((self.position[i] for i in needed), default=-1)
        self.forward = {_op_id(op) for op in self.ops[:end + 1]}

    def producer(self, value: ir.Value) -> ir.Operation | None:
        """The top-level op computing `value` (None: a function argument)."""
        owner = defining_op(value)
        return None if owner is None else top_level(owner, self.block)

    def _forward(self, loss: ir.Value) -> set[int]:
        seen: set[int] = set()
        stack = [self.producer(loss)]
        while stack:
            op = stack.pop()
            if op is None or _op_id(op) in seen:
                continue
            seen.add(_op_id(op))
            for _, _, value in _deep_operands(op):
                producer = self.producer(value)
                if producer is not None and _op_id(producer) != _op_id(op):
                    stack.append(producer)
        return seen

    def is_forward(self, op: ir.Operation) -> bool:
        return _op_id(op) in self.forward


def unit_of(path: str | None, pattern: str) -> str | None:
    """The first prefix of the module `path` (`blocks`, `blocks.0`, ...) that `pattern` matches, or None."""
    if not path:
        return None
    parts = path.split(".")
    for n in range(1, len(parts) + 1):
        prefix = ".".join(parts[:n])
        if matches(pattern, prefix):
            return prefix
    return None


def rematerialize(module: ir.Operation, pattern: str, policy: str = "full",
                  names: Sequence[str] = ()) -> list[Unit]:
    """Recompute the forward of the modules `pattern` matches in the backward of every function of `module`
    with a result named `loss` (see the module docstring); returns what was done per unit. InvalidTactic for a
    bad policy, or a pattern matching no module of the forward pass."""
    check_policy(policy, names)
    units: list[Unit] = []
    if policy == "none":
        return units
    for func in module.regions[0].blocks[0].operations:
        if as_op(func).name != func_d.FuncOp.OPERATION_NAME or not func.regions[0].blocks:
            continue
        loss = loss_index(func)
        if loss is not None:
            done = _rematerialize_function(func, loss, pattern, policy, tuple(names))
            _record(func, done, policy)
            units += done
    return units


def _record(func, units: list[Unit], policy: str) -> None:
    """Append what was done per unit to the function's `slicer.remat_units` (see core.names)."""
    attrs = as_op(func).attributes
    old = [ir.StringAttr(a).value for a in ir.ArrayAttr(attrs[REMAT_UNITS_ATTR])] if REMAT_UNITS_ATTR in attrs else []
    new = [f"{u.name} {policy} {u.saved_bytes} {u.recomputed_bytes} {u.cloned}" for u in units]
    attrs[REMAT_UNITS_ATTR] = ir.ArrayAttr.get([ir.StringAttr.get(t) for t in old + new])


def read_units(func_attributes) -> list[tuple[str, str, int, int, int]]:
    """(unit, policy, saved bytes, recomputed bytes, cloned ops) per unit recorded on a function."""
    if REMAT_UNITS_ATTR not in func_attributes:
        return []
    out = []
    for attr in ir.ArrayAttr(func_attributes[REMAT_UNITS_ATTR]):
        unit, policy, saved, recomputed, cloned = ir.StringAttr(attr).value.split(" ")
        out.append((unit, policy, int(saved), int(recomputed), int(cloned)))
    return out


def check_policy(policy: str, names: Sequence[str]) -> None:
    """InvalidTactic unless `policy` is one of `POLICIES` and `names` are given exactly for "save_names"."""
    if policy not in POLICIES:
        raise InvalidTactic(f"remat: policy={policy!r} must be one of {', '.join(POLICIES)}")
    if (policy == "save_names") != bool(names):
        raise InvalidTactic("remat: policy 'save_names' takes names=[...] (module paths or patterns whose values "
                            "are saved), and only it does" if names else
                            "remat: policy 'save_names' needs names=[...] (module paths or patterns whose values "
                            "are saved, e.g. ['blocks.*.attn.q'])")


def _rematerialize_function(func, loss: int, pattern: str, policy: str, names: tuple[str, ...]) -> list[Unit]:
    facts = _Function(func, loss)
    members: dict[str, list[ir.Operation]] = {}
    unit_by_op: dict[int, str] = {}
    paths: set[str] = set()
    for op in facts.ops:
        if not facts.is_forward(op):
            continue
        path = module_path(op.location)
        paths.update(_prefixes(path))
        unit = unit_of(path, pattern)
        if unit is not None:
            members.setdefault(unit, []).append(op)
            unit_by_op[_op_id(op)] = unit
    if not members:
        hint = closest_hint(pattern, sorted(paths))
        raise InvalidTactic(f"remat: the pattern {pattern!r} matches no module of the forward pass{hint}; '*' "
                            "matches any characters, dots included (e.g. 'blocks.*')")
    return [_rematerialize_unit(facts, name, ops, unit_by_op, policy, names) for name, ops in members.items()]


def _prefixes(path: str | None) -> list[str]:
    parts = path.split(".") if path else []
    return [".".join(parts[:n]) for n in range(1, len(parts) + 1)]


def _saved(facts: _Function, op: ir.Operation, value: ir.Value, unit: str, unit_by_op: dict[int, str],
           policy: str, names: tuple[str, ...]) -> bool:
    """Whether the forward value `value` (computed by `op` of `unit`) is saved rather than recomputed."""
    if op.name in COLLECTIVE_OPS:
        return True
    contraction = is_contraction(op)
    if remat_keeps(policy, names, module_path(op.location), contraction=contraction,
                   batched=contraction and has_batch_dims(op)):
        return True
    for use in value.uses:
        reader = top_level(as_op(use.owner), facts.block)
        if facts.is_forward(reader) and unit_by_op.get(_op_id(reader)) != unit:
            return True  # read by the forward outside the unit: its output, kept anyway
        if _op_id(reader) == _op_id(facts.ops[-1]):
            return True  # a result of the function (the loss): alive to the end anyway
    return False


def _rematerialize_unit(facts: _Function, name: str, ops: list[ir.Operation], unit_by_op: dict[int, str],
                        policy: str, names: tuple[str, ...]) -> Unit:
    unit = Unit(name)
    member = {_op_id(op) for op in ops}
    saved_keys: set[tuple] = set()
    backward_reads: dict[tuple, list[tuple[ir.Operation, int]]] = {}
    for op in ops:
        for value in op.results:
            reads = [(as_op(u.owner), u.operand_number) for u in value.uses
                     if not facts.is_forward(top_level(as_op(u.owner), facts.block))]
            if _is_source(facts, op) or _saved(facts, op, value, name, unit_by_op, policy, names):
                saved_keys.add(_key(value))
                if reads and op.name not in _NOT_HELD:
                    unit.saved.append(value)
            elif reads:
                backward_reads[_key(value)] = reads
                unit.recomputed.append(value)
    if not backward_reads:
        return unit
    cloned = _needed(facts, unit.recomputed, member, saved_keys)
    reported = {_key(v) for v in unit.saved}
    for op in cloned:  # the unit's saved values the recomputation reads are held for the backward too
        for _, _, value in _deep_operands(op):
            producer = facts.producer(value)
            if producer is not None and _op_id(producer) in member and _key(value) in saved_keys \
                    and _key(value) not in reported and producer.name not in _NOT_HELD:
                reported.add(_key(value))
                unit.saved.append(value)
    clones = _clone(facts, cloned, _anchors(facts, cloned, backward_reads), name)
    unit.cloned = len(cloned)
    for key, reads in backward_reads.items():
        for reader, index in reads:
            reader.operands[index] = clones[key]
    return unit


def _is_source(facts: _Function, op: ir.Operation) -> bool:
    """An op reading no tensor but the function's arguments and empty ones (a constant, a fill, a view of a
    weight): no activation, nothing to gain by recomputing it, and its result (CSE shares one among many
    readers, the update's included) would live from the first to the last of them."""
    for _, _, value in _deep_operands(op):
        if not isinstance(value.type, ir.RankedTensorType):
            continue
        producer = facts.producer(value)
        if producer is None or _op_id(producer) == _op_id(op):
            continue  # a function argument, or defined inside the op itself
        if producer.name != tensor.EmptyOp.OPERATION_NAME:
            return False
    return True


def _anchors(facts: _Function, ops: list[ir.Operation], reads: dict[tuple, list]) -> list[int]:
    """For each op to clone, the position of the op its clone goes right before: the first backward reader of
    its results, or the first place a clone that reads it goes, whichever is earlier (each recomputation just
    before its use)."""
    cloned = {_op_id(op): i for i, op in enumerate(ops)}
    anchor = [len(facts.ops) - 1] * len(ops)
    for i in range(len(ops) - 1, -1, -1):
        op = ops[i]
        for value in op.results:
            for reader, _ in reads.get(_key(value), ()):
                anchor[i] = min(anchor[i], facts.position[_op_id(top_level(reader, facts.block))])
        for _, _, value in _deep_operands(op):
            producer = facts.producer(value)
            if producer is not None and _op_id(producer) in cloned and _op_id(producer) != _op_id(op):
                j = cloned[_op_id(producer)]
                anchor[j] = min(anchor[j], anchor[i])
    return anchor


def _needed(facts: _Function, values: list[ir.Value], member: set[int], saved: set[tuple]) -> list[ir.Operation]:
    """The unit's ops computing `values`, and those they read that are neither saved nor outside the unit, in
    program order."""
    chosen: dict[int, ir.Operation] = {}
    stack = list(values)
    while stack:
        value = stack.pop()
        op = facts.producer(value)
        if op is None or _op_id(op) not in member or _key(value) in saved or _op_id(op) in chosen:
            continue
        chosen[_op_id(op)] = op
        stack += [v for _, _, v in _deep_operands(op)]
    return sorted(chosen.values(), key=lambda op: facts.position[_op_id(op)])


def _clone(facts: _Function, ops: list[ir.Operation], anchors: list[int], unit: str) -> dict[tuple, ir.Value]:
    """Clones of `ops` (in program order), each right before the op at its anchor, reading each other's
    results; original result key -> its clone."""
    mapping: dict[tuple, ir.Value] = {}
    cloned_ids = {_op_id(op) for op in ops}
    for op, limit in zip(ops, anchors, strict=True):
        for _, _, value in _deep_operands(op):
            producer = facts.producer(value)
            if producer is not None and _op_id(producer) not in cloned_ids and \
                    _op_id(producer) != _op_id(op) and facts.position[_op_id(producer)] >= limit:
                raise InvalidTactic(f"remat: {unit} cannot be recomputed before its backward: it reads "
                                    f"{producer.name} at {producer.location}, computed after the backward starts")
    for op, anchor in zip(ops, anchors, strict=True):
        clone = as_op(op.clone(ip=ir.InsertionPoint(facts.ops[anchor])))
        for owner, index, value in _deep_operands(clone):
            replacement = mapping.get(_key(value))
            if replacement is not None:
                owner.operands[index] = replacement
        for original, new in zip(op.results, clone.results, strict=True):
            mapping[_key(original)] = new
        clone.attributes[REMAT_ATTR] = ir.StringAttr.get(unit)
    return mapping


__all__ = ["LOSS", "POLICIES", "Unit", "check_policy", "has_batch_dims", "is_contraction", "loss_index", "read_units",
           "rematerialize", "unit_of"]
