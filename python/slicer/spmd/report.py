"""What an SPMD program communicates, and why: the collectives report (`slicer-opt --print-collectives`).

Read from the partitioned IR alone (so it works on any saved SPMD module): every collective op with its mesh
axes, local types before/after, the distributed type it produces (`slicer.dist`), the bytes each device
receives (the redistribution package's cost rules: all_gather (K-1)L, all_to_all and reduce_scatter (K-1)L/K,
all_reduce 2(K-1)L/K (ring), permute L, local slices 0), and its provenance decoded from its location
`NameLoc("<why>", FusedLoc[consumer location, producer location])` written by `slicer-partition` -- named
locations on the way (tactics from slicer-apply-tactics) are listed too. Function results say whether their
type was requested or is the default (the propagated type with partial sums reduced).

    from slicer.spmd.report import report
    print(report(module).text())
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from mlir import ir
from mlir.dialects import func as func_d

from slicer.core import dtypes
from slicer.core.errors import RedistributionError
from slicer.core.names import (
    DIST_ATTR,
    DIST_SOURCE_ATTR,
    GRID_ATTR,
    GRID_AXES_ATTR,
    MODULE_LOC_PREFIX,
    RES_ATTRS_ATTR,
    SPMD_MESH_ATTR,
    SYM_NAME_ATTR,
)
from slicer.core.operations import as_op
from slicer.dialect import grids
from slicer.redistribution.steps import STEP_OF_IR

from .degraded import notes_of


@dataclass(frozen=True)
class Place:
    """A source position (file:line:col) with the names (e.g. tactics) wrapped around it."""

    text: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class CollectiveEntry:
    function: str
    op: str
    mesh_axes: tuple[str, ...]
    local_before: tuple[int, ...]
    local_after: tuple[int, ...]
    dist_after: str
    bytes_received_per_device: int
    why: str
    places: tuple[Place, ...]


@dataclass(frozen=True)
class ResultEntry:
    function: str
    index: int
    dist: str
    source: str  # "requested" | "default" | "tactic <label>" (set by a result tactic)


@dataclass
class Report:
    collectives: list[CollectiveEntry] = field(default_factory=list)
    results: list[ResultEntry] = field(default_factory=list)
    meshes: dict[str, str] = field(default_factory=dict)
    degraded: dict[str, list[str]] = field(default_factory=dict)  # function -> its degraded-strategy notes

    @property
    def bytes_received_per_device(self) -> int:
        return sum(c.bytes_received_per_device for c in self.collectives)

    def text(self) -> str:
        lines = []
        functions = list(dict.fromkeys([r.function for r in self.results] + [c.function for c in self.collectives]))
        for fn in functions:
            lines.append(f"@{fn} on mesh {self.meshes.get(fn, '?')}")
            for r in (r for r in self.results if r.function == fn):
                how = r.source if r.source in ("requested",) or r.source.startswith("tactic ") \
                    else "default: the propagated type, partial sums reduced (no sharding was requested)"
                lines.append(f"  result #{r.index}: {r.dist} ({how})")
            mine = [c for c in self.collectives if c.function == fn]
            if not mine:
                lines.append("  no collectives")
            for i, c in enumerate(mine, 1):
                lines.append(f"  {i}. {c.op} over [{','.join(c.mesh_axes)}] "
                             f"{'x'.join(map(str, c.local_before))} -> {'x'.join(map(str, c.local_after))} "
                             f"-> {c.dist_after}: {c.bytes_received_per_device} B received per device")
                lines.append(f"     why: {c.why}")
                for place in c.places:
                    lines.append(f"     at: {place}")
            total = sum(c.bytes_received_per_device for c in mine)
            lines.append(f"  total: {len(mine)} collectives, {total} B received per device")
            for note in self.degraded.get(fn, ()):
                lines.append(f"  warning: {note}")
        return "\n".join(lines)


def _itemsize(element: ir.Type) -> int:
    size = dtypes.byte_size(str(element))
    if size is None:
        raise RedistributionError(f"collective on {element} values: {dtypes.unsupported(str(element))}")
    return size


def received_bytes(op: ir.Operation, group: int) -> int:
    """Bytes the busiest device receives in the collective `op` over a group of `group` devices (its class's
    cost rule, `Collective.busiest`)."""
    src = ir.RankedTensorType(op.operands[0].type)
    local = int(np.prod(src.shape, dtype=np.int64)) * _itemsize(src.element_type)
    return STEP_OF_IR[op.name].busiest(group, local)


def _places(loc: ir.Location) -> tuple[str, tuple[Place, ...]]:
    """(why, places) from `NameLoc(why, FusedLoc[...])`; unknown shapes of location are printed as is."""
    why = ""
    if loc.is_a_name():
        why, loc = loc.name_str, loc.child_loc
    parts = list(loc.locations) if loc.is_a_fused() else [loc]
    return why, tuple(Place(_describe(p)) for p in parts)


def _describe(loc: ir.Location) -> str:
    names = []
    while loc.is_a_name():
        if not loc.name_str.startswith(MODULE_LOC_PREFIX):  # the model's module of an imported op: not a reason
            names.append(loc.name_str)
        loc = loc.child_loc
    if loc.is_a_file():
        where = f"{loc.filename}:{loc.start_line}:{loc.start_col}"
    elif loc.is_a_fused():
        where = " + ".join(_describe(p) for p in loc.locations)
    else:
        where = str(loc).removeprefix("loc(").removesuffix(")")
    return where + (f" (from {'; '.join(names)})" if names else "")


def report(module: ir.Module | ir.Operation) -> Report:
    """The collectives report of every partitioned function in `module`."""
    root = as_op(module)
    out = Report()
    grid_table = grids(root)
    for func in root.regions[0].blocks[0].operations:
        func = func.operation
        if func.name != func_d.FuncOp.OPERATION_NAME or SPMD_MESH_ATTR not in func.attributes:
            continue
        name = ir.StringAttr(func.attributes[SYM_NAME_ATTR]).value
        out.meshes[name] = ir.StringAttr(func.attributes[SPMD_MESH_ATTR]).value
        if notes_of(func):
            out.degraded[name] = notes_of(func)
        if RES_ATTRS_ATTR in func.attributes:
            for index, attrs in enumerate(ir.ArrayAttr(func.attributes[RES_ATTRS_ATTR])):
                attrs = ir.DictAttr(attrs)
                if DIST_ATTR in attrs:
                    source = ir.StringAttr(attrs[DIST_SOURCE_ATTR]).value if DIST_SOURCE_ATTR in attrs else "requested"
                    out.results.append(ResultEntry(name, index, ir.StringAttr(attrs[DIST_ATTR]).value, source))
        for op in func.regions[0].blocks[0].operations:
            op = op.operation
            if op.name not in STEP_OF_IR:
                continue
            grid = ir.FlatSymbolRefAttr(op.attributes[GRID_ATTR]).value
            axis_names, sizes = grid_table.get(grid, ([], []))
            if GRID_AXES_ATTR not in op.attributes:  # a device map (a permute): any devices, in pairs
                axes, group = tuple(axis_names), 2
            else:
                indices = list(ir.DenseI16ArrayAttr(op.attributes[GRID_AXES_ATTR]))
                axes = tuple(axis_names[i] if i < len(axis_names) else str(i) for i in indices)
                group = int(np.prod([sizes[i] for i in indices if i < len(sizes)], dtype=np.int64))
            why, places = _places(op.location)
            dist = ir.StringAttr(ir.ArrayAttr(op.attributes[DIST_ATTR])[0]).value if DIST_ATTR in op.attributes else "?"
            out.collectives.append(CollectiveEntry(
                name, op.name, axes, tuple(ir.RankedTensorType(op.operands[0].type).shape),
                tuple(ir.RankedTensorType(op.results[0].type).shape), dist, received_bytes(op, group), why, places))
    return out
