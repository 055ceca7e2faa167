"""What a function being partitioned knows about its values, and how a value reaches another distributed type.

`PartitionedValue` is what a value of the loop program has become (its local SSA value, distributed type, loop
context); `PartitionState` holds them for one function and converts one to the type a use needs: a local
repad where padded sizes differ, then the redistribution synthesizer's plan emitted as collectives. The
partitioner (`partitioner.py`) and its typing rules (`loops_and_slices.py`, `tiled_max.py`, `partial_terms.py`,
`padding.py`) all work through it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mlir import ir

from slicer.core import dtypes
from slicer.core.errors import Located, PassFailure, Unsupported
from slicer.core.functions import function_name
from slicer.core.names import CONFLICT_ATTR, DIST_ATTR, GRID_ATTR, INDEX_AXES_ATTR, MULTI_INDEX
from slicer.dialect import Sharding
from slicer.redistribution import DistType, Mesh, RedistributionError, plan

from .degraded import LostSplit
from .dist_types import dist_text, replicated
from .emit_collectives import PlanEmitter
from .padding import padded_type, pads_through, repad
from .view_moves import move_through_view


@dataclass
class PartitionedValue:
    """What a value of the loop program has become: its local SSA value, distributed type and context."""

    local: ir.Value
    type: DistType
    context: frozenset[str]
    origin: str
    loc: ir.Location
    logical: tuple[int, ...] | None = None  # the value's true shape when `type`'s is padded (uneven tiles)
    pads: dict = field(default_factory=dict)  # in loop bodies: dim -> padding.Pad, dims of padded blocks
    tactic: str = ""  # the tactic whose loop tiled it (a degraded strategy names it when the value is gathered)
    loss: LostSplit | None = None  # a gathered tactic value it was reshaped or copied from (slicer.spmd.degraded)

    @property
    def shape(self) -> tuple[int, ...]:
        """The value's logical global shape (`type.shape` rounds uneven tiled dims up)."""
        return self.logical or self.type.shape


@dataclass
class PartitionState:
    """One function being partitioned: what each value of the loop program became (`env`), the loops' ranges
    in scope, the ops to erase at the end, and the conversions of a value to another distributed type."""

    func: ir.Operation
    grid: str
    mesh: Mesh
    env: dict = field(default_factory=dict)
    cache: dict = field(default_factory=dict)
    ranges: dict = field(default_factory=dict)
    erase: list = field(default_factory=list)
    degraded: list = field(default_factory=list)
    _coords: list | None = None

    @property
    def fname(self) -> str:
        return function_name(self.func)

    def canon(self, t: DistType, loc: ir.Location) -> DistType:
        try:
            return DistType.of(self.mesh, t.shape, t.dims, t.partial)
        except RedistributionError as exc:
            raise PassFailure(Located(loc, f"slicer-partition: {exc}")) from None

    def valid(self, entry: PartitionedValue, t: DistType) -> bool:
        """Can `entry`'s value take the tiling of `t` (dims that do not divide as padded blocks over one axis)?"""
        try:
            t = padded_type(self.mesh, entry.shape, t)
            DistType.of(self.mesh, t.shape, t.dims, t.partial)
        except RedistributionError:
            return False
        return True

    def target(self, logical: tuple[int, ...], t: DistType, loc: ir.Location) -> DistType:
        """`t`'s tiling on a value of logical shape `logical`: canonical, uneven dims padded."""
        try:
            return self.canon(padded_type(self.mesh, logical, t), loc)
        except RedistributionError as exc:
            raise PassFailure(Located(loc, f"slicer-partition: {exc}")) from None

    def coords(self) -> list[ir.Value]:
        if self._coords is None:
            block = self.func.regions[0].blocks[0]
            op = ir.Operation.create(
                MULTI_INDEX, results=[ir.IndexType.get()] * self.mesh.ndim,
                attributes={GRID_ATTR: ir.FlatSymbolRefAttr.get(self.grid),
                            INDEX_AXES_ATTR: ir.DenseI16ArrayAttr.get(list(range(self.mesh.ndim)))},
                loc=self.func.location, ip=ir.InsertionPoint.at_block_begin(block))
            self._coords = list(op.results)
        return self._coords

    def lookup(self, value: ir.Value) -> PartitionedValue | None:
        return self.env.get(value)

    def convert(self, entry: PartitionedValue, target: DistType, before: ir.Operation, why: str) -> ir.Value:
        """`entry`'s local value redistributed to `target`'s tiling, emitted before `before` (cached per
        target). The target's shape is recomputed from the value's logical shape (uneven dims padded)."""
        target = self.target(entry.shape, target, before.location)
        if entry.type == target:
            return entry.local
        key = (entry.local, entry.type, target)
        if key in self.cache:
            return self.cache[key]
        element = str(ir.RankedTensorType(entry.local.type).element_type)
        if dtypes.numpy_dtype(element) is None:
            raise PassFailure(Located(before.location, f"slicer-partition: cannot redistribute {entry.origin}: "
                                                       f"{dtypes.unsupported(element)}"))
        moved = move_through_view(self, entry, target, before, why) if target.shape == entry.type.shape else None
        if moved is not None:  # several views of one value: the value moves once (`view_moves`)
            self.cache[key] = moved
            return moved
        source = entry
        if target.shape != entry.type.shape:
            source = repad(self, entry, target, before, why)
        local = source.local if source.type == target else self.emit_plan(source, target, before, why)
        self.cache[key] = local
        return local

    def emit_plan(self, entry: PartitionedValue, target: DistType, before: ir.Operation, why: str) -> ir.Value:
        """The synthesizer's plan from `entry`'s type to `target` (same padded shape), emitted before `before`."""
        element = str(ir.RankedTensorType(entry.local.type).element_type)
        try:
            # Devices differing on the entry's loop axes hold different members of its family: the plan
            # must not communicate over those axes.
            p = plan(self.mesh, entry.type, target, dtype=element, frozen=tuple(sorted(entry.context)))
        except RedistributionError as exc:
            raise PassFailure(Located(before.location, f"slicer-partition: cannot redistribute {entry.origin} from "
                                                       f"{entry.type} to {target} for {why}: {exc}")) from None
        reason_base = f"{why}; source: {entry.origin} {entry.type} -> {target}"
        if CONFLICT_ATTR in before.attributes:  # recorded by slicer-propagate on the consumer
            reason_base += f"; {ir.StringAttr(before.attributes[CONFLICT_ATTR]).value}"

        def loc(step) -> ir.Location:
            child = ir.Location.fused([before.location, entry.loc])
            return ir.Location.name(f"{step.op}: {reason_base}", childLoc=child)

        with ir.InsertionPoint(before):
            return PlanEmitter(self.mesh, self.grid, self.coords).emit(entry.local, p, loc)

    def padded_results(self, op: ir.Operation, context: frozenset[str], operand_pads: dict) -> list[dict]:
        """The padded dims of each result of `op` (`operand_pads`: operand index -> its padded dims); an op
        reducing over a padded dim is masked so the padding never reaches a real value (`padding.pads_through`)."""
        if not operand_pads:
            return [{} for _ in op.results]
        emitter = PlanEmitter(self.mesh, self.grid, self.coords)

        def mark(made: ir.Operation) -> None:
            shape = tuple(ir.RankedTensorType(made.results[0].type).shape)
            made.attributes[DIST_ATTR] = ir.ArrayAttr.get([ir.StringAttr.get(dist_text(replicated(shape), context))])

        try:
            return pads_through(op, operand_pads, emitter.group_index, mark)
        except Unsupported as exc:
            raise self.fail(op, f"'{op.name}' cannot compute on padded blocks: {exc}") from None


    def check_mesh(self, sharding: Sharding, what: str, op: ir.Operation | None = None) -> None:
        if sharding.mesh != self.grid:
            raise self.fail(op or self.func, f"{what} requests a sharding over mesh @{sharding.mesh}, but "
                                             f"@{self.fname} is partitioned over @{self.grid}; use one mesh per "
                                             "function")

    def fail(self, op: ir.Operation, message: str) -> PassFailure:
        return PassFailure(Located(op.location, f"slicer-partition: {message}"))

