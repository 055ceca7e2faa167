"""What every collective class provides, and the one registry of them (`STEP_TYPES`, `STEP_OF_IR`).

A collective kind is one class (`steps.py` holds the six of the planner), registered with :func:`register`.
The class owns its typing rule, cost, numpy semantics, text form and IR form (attribute keys and values, read
back by ``from_ir``); the layers above own what needs IR or MPI and key it by the class: the emission in
`slicer.spmd.emit_collectives` (``EMISSIONS``), the execution in `slicer.runtime.collectives.collective_kinds`
(``EXECUTIONS``). Nothing else branches on the kind: a new kind is its class plus one entry in each table
(docs/architecture.md, "A new collective").
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np

from slicer.core.errors import RedistributionError
from slicer.core.mesh import Mesh
from slicer.core.names import GRID_AXES_ATTR

from . import subaxes
from .layout import Layout, groups
from .types import DistType


class Collective:
    """What every collective class provides besides its fields. The defaults fit a step over a group
    ``mesh_axes`` whose tensor dims are the fields named in ``ir_dim_keys``. Each class also defines
    ``rule(before, mesh, layout=None)``, ``inverse(dims, partial)`` (edits the lists of the type after into
    those of the type before; False when it cannot) and the static ``busiest(k, local)``: the elements the
    busiest device receives in a group of ``k`` devices holding ``local`` elements each."""

    op: ClassVar[str]  # the kind's name in plans, JSON and the kernel graph
    phase: ClassVar[int | None]  # normal form: 0 shrinking, 1 constant size, 2 growing, None anywhere before 2
    ir_name: ClassVar[str]  # the IR op (slicer.core.names)
    ir_aliases: ClassVar[tuple[str, ...]] = ()  # other IR ops read back as this class
    ir_dim_keys: ClassVar[dict[str, str]] = {}  # field -> the IR attribute holding that tensor dim
    local: ClassVar[bool] = False  # no communication: a device computes its block after from its own block
    reduces: ClassVar[bool] = False  # combines the blocks of a group (`reduction`) rather than moving them
    reduction = "sum"  # how a reducing step combines (`steps.REDUCTIONS`; an instance field of `AllReduce`)
    relabels: ClassVar[bool] = False  # any type of the same local shape before it: consecutive ones compose
    point_to_point: ClassVar[bool] = False  # each device receives at most one other device's block, no group

    if TYPE_CHECKING:  # what each kind defines (a frozen dataclass: its fields, its rules), for type checkers
        __dataclass_fields__: ClassVar[dict[str, Any]]
        mesh_axes: tuple[str, ...]
        type_after: DistType

        def __init__(self, *fields: Any, **named: Any) -> None: ...
        def rule(self, before: DistType, mesh: Mesh, layout: Layout | None = None) -> DistType: ...
        def inverse(self, dims: list, partial: list) -> bool: ...
        def numpy_group(self, layout: Layout, row, blocks: list) -> list: ...
        @staticmethod
        def busiest(k: int, local: int) -> int: ...

    def received(self, before: DistType, layout: Layout) -> np.ndarray:
        """Elements each device receives (all devices take part alike)."""
        k = subaxes.group_size(layout.mesh, self.mesh_axes)
        return np.full(layout.device_count, self.busiest(k, before.local_size(layout.mesh)), dtype=np.int64)

    def numpy_blocks(self, layout: Layout, blocks) -> list[np.ndarray]:
        """The step's semantics on real data: every device's block after it, from the rank-indexed list of
        blocks before it (the reference the MPI executor and the kernel graph's runs are checked against)."""
        out: list = [None] * layout.device_count
        for row in groups(layout, self.mesh_axes):
            for r, block in zip(row, self.numpy_group(layout, row, [blocks[r] for r in row]), strict=True):
                out[r] = block
        return out

    @classmethod
    def local_after(cls, k: int, local: int) -> int:
        """Elements a device holds after a step of this kind over ``k`` devices holding ``local`` each
        (by its ``phase``: shrinking steps divide by ``k``, growing ones multiply)."""
        by_phase: dict[int | None, int] = {0: local // k, 2: local * k}
        return by_phase.get(cls.phase, local)

    def tensor_dims(self) -> tuple[int, ...]:
        """The tensor dims the step slices, gathers, splits or concatenates (in ``ir_dim_keys`` order)."""
        return tuple(getattr(self, name) for name in self.ir_dim_keys)

    def link_axes(self, mesh: Mesh) -> tuple[str, ...]:
        """The mesh axes the step communicates over (their links set its time)."""
        return tuple(self.mesh_axes)

    def named_axes(self) -> set[str]:
        """Every axis or sub-axis the step names (its groups)."""
        return set(self.mesh_axes)

    def moves_nothing(self) -> bool:
        """The step leaves every block where it is (emitted as no op at all)."""
        return False

    def retyped(self, type_after: DistType) -> Collective:
        """The same step with another ``type_after``."""
        return replace(self, type_after=type_after)

    def lifted(self, refinement: subaxes.Refinement, type_after: DistType) -> Collective:
        """This step of the refined mesh of ``refinement`` as a step of the real mesh (same devices)."""
        return replace(self, mesh_axes=refinement.up_axes(self.mesh_axes), type_after=type_after)

    def on_mesh(self, mesh: Mesh, sub: Mesh) -> Collective:
        """This step of ``sub`` (``mesh`` without some axes) as a step of ``mesh``, in every group of devices
        agreeing on the other axes (axes are named: the same step, unless it names devices)."""
        return self

    def merged(self, after: Self, mesh: Mesh) -> Self | None:
        """One step doing this step then ``after`` (same kind), or None when there is none."""
        return None

    def fields(self) -> dict:
        """The text form of the step (without ``op`` and ``type_after``): JSON-ready values."""
        out = {name: getattr(self, name) for name in self.ir_dim_keys}
        out["mesh_axes"] = list(self.mesh_axes)
        return out

    @classmethod
    def from_fields(cls, fields: dict, type_after: DistType) -> Collective:
        """The step whose `fields()` are ``fields`` (lists read back as tuples)."""
        return cls(**{k: _tuples(v) for k, v in fields.items()}, type_after=type_after)

    # -- the IR form: written by slicer.spmd.emit_collectives, read by slicer.lowering.graph_builder ---------
    def ir_op_name(self) -> str:
        """The IR op this step is emitted as."""
        return self.ir_name

    def ir_dims(self) -> dict[str, int]:
        """IR attribute key -> tensor dim (an index attribute)."""
        return {key: getattr(self, name) for name, key in self.ir_dim_keys.items()}

    def ir_groups(self) -> dict[str, tuple[str, ...]]:
        """IR attribute key -> the mesh axes of a group (emitted as grid axis indices)."""
        return {GRID_AXES_ATTR: tuple(self.mesh_axes)}

    def ir_ints(self) -> dict[str, list[int]]:
        """IR attribute key -> a list of integers (a dense i64 array attribute)."""
        return {}

    def ir_reductions(self) -> dict[str, str]:
        """IR attribute key -> a reduction other than the op's default sum (`#shard<partial ...>`)."""
        return {}

    @classmethod
    def from_ir(cls, name: str, read, type_after: DistType) -> Collective:
        """The step an op ``name`` performs, from ``read``: ``read.dim(key)`` (an index attribute),
        ``read.group(key)`` (the mesh axes of a grid-axes attribute, () when absent), ``read.ints(key)`` and
        ``read.reduction(key)`` ("sum" when absent): the inverse of the ``ir_*`` methods."""
        dims = {field_name: read.dim(key) for field_name, key in cls.ir_dim_keys.items()}
        return cls(**dims, mesh_axes=read.group(GRID_AXES_ATTR), type_after=type_after)


def _tuples(value):
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


#: The one registry of the collectives: op (their name in plans, JSON and the kernel graph) -> class.
STEP_TYPES: dict[str, type[Collective]] = {}
#: IR op name -> class (the reordering all-to-all is an `AllToAll` too).
STEP_OF_IR: dict[str, type[Collective]] = {}


def register(cls: type[Collective]) -> type[Collective]:
    """Register a collective class (a class decorator): its ``op`` and IR op names."""
    if cls.op in STEP_TYPES and STEP_TYPES[cls.op] is not cls:
        raise RedistributionError(f"collective '{cls.op}' is registered twice ({STEP_TYPES[cls.op].__name__}, "
                                  f"{cls.__name__}); give the new kind another op name")
    STEP_TYPES[cls.op] = cls
    for name in (cls.ir_name, *cls.ir_aliases):
        STEP_OF_IR[name] = cls
    return cls


def step_from_fields(op: str, fields: dict, type_after: DistType) -> Collective:
    """The step of kind ``op`` whose text form is ``fields`` (`Collective.fields`)."""
    if op not in STEP_TYPES:
        raise RedistributionError(f"unknown collective '{op}': the collectives are {', '.join(STEP_TYPES)}")
    return STEP_TYPES[op].from_fields(fields, type_after)


def type_before(step: Collective, after: DistType, mesh: Mesh) -> DistType | None:
    """The type before ``step`` given the type after it (its typing rule inverted), or None when the rule
    cannot be inverted (a permute: any type with the same local shape comes before it)."""
    dims, partial = [list(d) for d in after.dims], list(after.partial)
    if not step.inverse(dims, partial):
        return None
    try:
        before = DistType.of(mesh, after.shape, dims, partial)
        return before if apply_rule(step, before, mesh) == after else None
    except RedistributionError:
        return None


def apply_rule(step: Collective, before: DistType, mesh: Mesh, layout: Layout | None = None) -> DistType:
    """The type after ``step`` from the type before it (raises if the step does not type-check)."""
    return step.rule(before, mesh, layout)


def step_with_type(step: Collective, type_after: DistType) -> Collective:
    """The same step with another ``type_after`` (used when re-deriving types)."""
    return step if step.type_after == type_after else step.retyped(type_after)
