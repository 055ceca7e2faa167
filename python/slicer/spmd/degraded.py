"""Degraded strategies: where a tactic's split is lost and the work it was meant to divide runs whole on every
device.

A tactic tiles a value so that the ops using it compute block-wise. When propagation cannot take the tiling
into an op (its rule does not allow it, or a dim does not divide: 6 attention heads on y=4), the op stays
replicated; partitioning then gathers the tactic's value for it (`all_gather`) and every device computes the op
on the whole value. The program is still right, but the strategy is not what was asked: the partitioner notes
each such place here, and `slicer.compile` says them as `DegradedStrategy` warnings (an error with
`strict=True`).

A gather for an op that is itself partitioned over the gathered axes (sequence parallelism's keys and values,
FSDP's weights inside the batch loop) is the strategy working as meant and is not noted. An op that only moves
data (a reshape, slice, transpose or copy) passes the judgement on to the op computing on its result: FSDP's
fused QKV weight is gathered for a reshape outside the batch loop, then multiplied inside it.

    found = loss(tactic, op, "operand #0", dist, context, mesh)   # None when nothing is lost
    found.note(op)          # said where an op computes replicated on the gathered value
    record(func, notes);   notes_of(func)
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import linalg, tensor

from slicer.core.names import BLOCKED_ATTR, DEGRADED_ATTR
from slicer.redistribution import DistType, Mesh, subaxes

_MOVES_DATA = (tensor.ExpandShapeOp.OPERATION_NAME, tensor.CollapseShapeOp.OPERATION_NAME,
               tensor.ExtractSliceOp.OPERATION_NAME, linalg.TransposeOp.OPERATION_NAME,
               linalg.BroadcastOp.OPERATION_NAME)


@dataclass(frozen=True)
class LostSplit:
    """A tactic's value gathered over `axes` for an op computed replicated over them: the split is lost if that
    op, or the first op computing on its result (after reshapes, slices and copies), is replicated over them."""

    tactic: str
    axes: tuple[str, ...]
    gathered: str  # "operand #0 of 'tensor.expand_shape' at file:12:3"
    dist: DistType
    why: str

    def note(self, op: ir.Operation) -> str:
        """What to tell the user when `op` computes replicated on the gathered value."""
        axes = ",".join(self.axes)
        at = f"'{op.name}' at {where(op.location)}"
        return (f"{self.tactic} is degraded: its value ({self.dist}) is all_gathered over {axes} as {self.gathered}, "
                f"and {at} is computed whole on every device instead of split over {axes} ({self.why})")


def moves_data(op: ir.Operation) -> bool:
    """Does `op` only reshape, slice, transpose or copy its input (no arithmetic)? A gather for such an op is
    judged by the op that computes on its result."""
    if op.name in _MOVES_DATA:
        return True
    if op.name != linalg.GenericOp.OPERATION_NAME:
        return False
    body = op.regions[0].blocks[0]
    ops = list(body.operations)
    return len(ops) == 1 and len(ops[0].operands) == 1 and isinstance(ops[0].operands[0], ir.BlockArgument) \
        and ir.BlockArgument(ops[0].operands[0]).owner == body


def lost_axes(dist: DistType, context: frozenset[str], mesh: Mesh) -> tuple[str, ...]:
    """The mesh axes `dist` tiles a dim over (of more than one device) that an op in loops over `context` does
    not partition over: gathering `dist` for that op drops them."""
    found = []
    for dim in dist.dims:
        for axis in dim:
            base = axis.split(":")[0]
            if subaxes.size(mesh, axis) > 1 and base not in context and base not in found:
                found.append(base)
    return tuple(found)


def loss(tactic: str, op: ir.Operation, what: str, dist: DistType, context: frozenset[str],
         mesh: Mesh) -> LostSplit | None:
    """The loss when `op` (computed in loops over `context`) gathers `what`, a value of type `dist` that `tactic`
    tiled; None when the gather drops none of the tactic's axes (or no tactic tiled the value)."""
    lost = lost_axes(dist, context, mesh)
    if not tactic or not lost:
        return None
    why = (ir.StringAttr(op.attributes[BLOCKED_ATTR]).value if BLOCKED_ATTR in op.attributes
           else f"propagation found no way to compute '{op.name}' block-wise over {','.join(lost)}")
    return LostSplit(tactic, lost, f"{what} of '{op.name}' at {where(op.location)}", dist, why)


def where(loc: ir.Location) -> str:
    """A location as `file:line:col` (names around it dropped)."""
    while loc.is_a_name():
        loc = loc.child_loc
    if loc.is_a_file():
        return f"{loc.filename}:{loc.start_line}:{loc.start_col}"
    return str(loc).removeprefix("loc(").removesuffix(")")


def record(func: ir.Operation, notes: list[str]) -> None:
    """Write `notes` (without repeats) on the SPMD function (`slicer.degraded`), or nothing when there are none."""
    notes = list(dict.fromkeys(n for n in notes if n))
    if notes:
        func.attributes[DEGRADED_ATTR] = ir.ArrayAttr.get([ir.StringAttr.get(n) for n in notes])


_SPLIT = " instead of split over "
_STOPS = " stops here: "


def cause(note: str) -> str:
    """What degrades the strategy at the place `note` (a `LostSplit.note`) describes, without naming the tactic or the
    place: the reason propagation gave ("... has size 3, which y=2 does not divide"), so that the notes of one
    cause (every layer's heads, forward and backward) can be said once."""
    _, found, rest = note.partition(_SPLIT)
    why = rest.partition(" (")[2].removesuffix(")") if found else note
    return why.partition(_STOPS)[2] or why


def by_cause(notes: list[str]) -> list[str]:
    """The notes said once per cause (`cause`): a note alone as it is; several as one text that gives the cause,
    the first note in full, then the tactics and the places of the others (a few of each, and how many more)."""
    groups: dict[str, list[str]] = {}
    for note in notes:
        groups.setdefault(cause(note), []).append(note)
    said = []
    for reason, group in groups.items():
        if len(group) == 1:
            said.append(group[0])
            continue
        tactics = list(dict.fromkeys(n.partition(" is degraded:")[0] for n in group))
        places = list(dict.fromkeys(_place(n) for n in group))
        said.append(f"{len(group)} places lose a tactic's split for one cause: {reason}. The first: {group[0]}. "
                    f"Tactics: {_few(tactics)}; places: {_few(places)}")
    return said


def _place(note: str) -> str:
    """The op a note says is computed whole, with its location ("'linalg.generic' at model.py:30:0")."""
    head = note.partition(_SPLIT)[0]
    return head.rpartition(", and ")[2].removesuffix(" is computed whole on every device")


def _few(items: list[str], shown: int = 4) -> str:
    more = len(items) - shown
    return ", ".join(items[:shown]) + (f" and {more} more" if more > 0 else "")


def notes_of(func: ir.Operation) -> list[str]:
    """The degradation notes `record` wrote on an SPMD function."""
    if DEGRADED_ATTR not in func.attributes:
        return []
    return [ir.StringAttr(a).value for a in ir.ArrayAttr(func.attributes[DEGRADED_ATTR])]
