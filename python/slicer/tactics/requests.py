"""The requests a module's tactics stand for: each tactic bound to its target in the IR.

Sources, in this order (docs/tactics.md): the IR annotations, function by function (`slicer.sharding` on
arguments, then results, then `slicer.annotate` ops), then the schedule on the entry function, whose targets may
be positions, names (`slicer.name`) or name patterns (`patterns.py`, one request per match). A request repeating
an earlier one is dropped: asking twice is asking once.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from mlir import ir

from slicer.core.errors import InternalError, Located, MeshError
from slicer.core.functions import (
    EntryError,
    defined_functions,
    entry_function,
    function_name,
    function_type,
    value_names,
)
from slicer.core.mesh import Mesh
from slicer.core.names import (
    ANNOTATE,
    ARG_ATTRS_ATTR,
    ARG_NAME_ATTR,
    RES_ATTRS_ATTR,
    SHARDING_ATTR,
    SHARDING_OPERAND_ATTR,
)
from slicer.dialect import AnnotateOp, Sharding, find_meshes, walk_ops

from .patterns import closest, is_pattern, matching
from .values import Replicate, Tactic, Tile

NEW_MESH_NAME = "mesh"
"""The symbol of the `slicer.mesh` inserted when the module declares none."""


@dataclass
class TacticRequest:
    """One tactic bound to its target in the IR.

    `kind` is "arg", "result" or "value" (a `slicer.annotate` op); `tile` is
    `(dim, axes)` or None for a replicate request; `label` names the tactic in
    messages (its Python form and, for annotations, where it came from).
    """

    kind: str
    index: int
    tile: tuple[int, tuple[str, ...]] | None
    label: str
    func: ir.Operation
    mesh: str | None
    location: ir.Location
    annotate_op: ir.Operation | None = None
    name: str | None = None  # the argument's name, when the tactic named it

    @property
    def key(self) -> tuple:
        return (function_name(self.func), self.kind, self.index)

    def what(self) -> str:
        if self.kind == "value":
            return "the 'slicer.annotate' value"
        named = f" ({self.name})" if self.name else ""
        return f"{'argument' if self.kind == 'arg' else 'result'} #{self.index}{named} of @{function_name(self.func)}"


class RequestCollector:
    """Reads one module's requests: its annotations, then a schedule on its entry function. Problems are
    collected in `errors` (located), so every one is reported at once."""

    def __init__(self, module: ir.Operation, tactics: tuple[Tactic, ...] = (), *, mesh=None,
                 entry: str | None = None):
        """`mesh`: None, a declared mesh's name, or a `Mesh` / `{axis: size}` mapping."""
        self.module = module
        self.tactics = tactics
        self.asked_mesh = mesh
        self.entry = entry
        self.errors: list[Located] = []
        self.meshes: dict[str, Mesh] = {}  # declared meshes by symbol name
        self.new_mesh: Mesh | None = None  # to insert as `slicer.mesh @mesh`
        self._names: dict[tuple[str, str], list[str | None]] = {}  # (function, "arg"/"result") -> `names`

    def collect(self) -> list[TacticRequest]:
        """Every request, in application order, repeats dropped (in the module's context)."""
        for name, view in find_meshes(self.module).items():
            try:
                self.meshes[name] = view.mesh()
            except ValueError:
                pass  # malformed mesh (MeshError is a ValueError too): slicer-verify reports it
        return _without_repeats(self.annotation_requests() + self.schedule_requests())

    def names(self, func: ir.Operation, kind: str) -> list[str | None]:
        """`value_names(func, kind)`, read once per function and kind: every named tactic resolves against them
        (a training step's schedule names hundreds of arguments; reading the attributes again for each is slow)."""
        key = (function_name(func), kind)
        if key not in self._names:
            self._names[key] = value_names(func, kind)
        return self._names[key]

    def error(self, location: ir.Location, message: str) -> None:
        self.errors.append(Located(location, message))

    def annotation_requests(self) -> list[TacticRequest]:
        requests: list[TacticRequest] = []
        for func in defined_functions(self.module):
            fn_type = function_type(func)
            for key, kind, types in ((ARG_ATTRS_ATTR, "arg", fn_type.inputs),
                                     (RES_ATTRS_ATTR, "result", fn_type.results)):
                if key not in func.attributes:
                    continue
                for index, attrs in enumerate(ir.ArrayAttr(func.attributes[key])):
                    attrs = ir.DictAttr(attrs)
                    if SHARDING_ATTR in attrs:
                        what = f"{'argument' if kind == 'arg' else 'result'} #{index} of @{function_name(func)}"
                        requests += self.from_sharding(attrs[SHARDING_ATTR], types[index], kind, index, func,
                                                       func.location, f"the slicer.sharding of {what}")
            for number, op in enumerate(walk_ops(func, ANNOTATE)):
                view = AnnotateOp(op)
                requests += self.from_sharding(op.attributes[SHARDING_OPERAND_ATTR], view.source.type, "value", number,
                                               func, op.location, "'slicer.annotate'", annotate_op=op)
        return requests

    def from_sharding(self, attr, type_, kind, index, func, location, origin, annotate_op=None) -> list[TacticRequest]:
        """The requests a `#slicer.sharding` stands for: one Tile per tiled dim, or one Replicate."""
        sharding = Sharding.of(attr)
        if sharding is None:
            self.error(location, f"{origin}: expected #slicer.sharding<@mesh, [[axes], ...]>, got {attr}")
            return []
        if not isinstance(type_, ir.RankedTensorType) or len(sharding.dims) != type_.rank:
            self.error(location, f"{origin}: sharding {sharding} needs a ranked tensor with one axis list per dim, "
                                 f"got {type_}")
            return []

        def label(tile) -> str:
            if kind == "value":
                if tile is None:
                    return f"Replicate() from {origin}"
                axes = tile[1][0] if len(tile[1]) == 1 else tile[1]
                return f"Tile(dim={tile[0]}, axes={axes!r}) from {origin}"
            return f"{_tactic_label(kind, index, tile)} from {origin}"

        tiles = [(dim, axes) for dim, axes in enumerate(sharding.dims) if axes]
        for dim, axes in tiles:
            if len(set(axes)) != len(axes):
                self.error(location, f"{origin}: sharding {sharding} lists an axis twice for dim {dim}; "
                                     "a dim is tiled by each axis at most once")
                return []
        if not tiles:
            return [TacticRequest(kind, index, None, label(None), func, sharding.mesh, location, annotate_op)]
        return [TacticRequest(kind, index, tile, label(tile), func, sharding.mesh, location, annotate_op)
                for tile in tiles]

    def schedule_requests(self) -> list[TacticRequest]:
        if not self.tactics:
            if self.asked_mesh is not None:
                self.schedule_mesh(self.module.location)  # an empty schedule still names the mesh (inserted if new)
            return []
        func = self.entry_function()
        mesh = self.schedule_mesh(func.location if func is not None else self.module.location)
        if func is None or mesh is None:
            return []
        requests = []
        for tactic in self.tactics:
            if not isinstance(tactic, (Tile, Replicate)):  # a Remat: it places no value
                self.error(func.location, f"{tactic} is applied after partitioning (slicer.compile runs "
                                          "slicer-remat), not with the tactics that place values")
                continue
            if tactic.arg is not None:
                kind, index = "arg", tactic.arg
            elif tactic.result is not None:
                kind, index = "result", tactic.result
            else:  # refused when the tactic was made (`values._check_target`)
                raise InternalError(f"{tactic} names neither an argument nor a result")
            tile = (tactic.dim, tactic.axis_names) if isinstance(tactic, Tile) else None
            if not isinstance(index, str):
                requests.append(TacticRequest(kind, index, tile, str(tactic), func, mesh, func.location))
            elif is_pattern(index):
                for position, name in self.expand_pattern(func, kind, index, str(tactic)):
                    requests.append(TacticRequest(kind, position, tile, f"{tactic} on '{name}'", func, mesh,
                                                  func.location, name=name))
            else:
                resolved = self.resolve_name(func, kind, index, str(tactic))
                if resolved is not None:
                    requests.append(TacticRequest(kind, resolved, tile, str(tactic), func, mesh, func.location,
                                                  name=index))
        return requests

    def expand_pattern(self, func: ir.Operation, kind: str, pattern: str, label: str) -> list[tuple[int, str]]:
        """The (position, name) of every argument (or result) of `func` whose name `pattern` matches, in order; an
        empty list after reporting a pattern that matches nothing (naming the closest names)."""
        names = self.names(func, kind)
        found = [(i, name) for i in matching(pattern, names) if (name := names[i]) is not None]
        if found:
            return found
        noun = "argument" if kind == "arg" else "result"
        known = [n for n in names if n is not None]
        where = f"@{function_name(func)}"
        if not known:
            self.error(func.location, f"{label}: the {noun}s of {where} carry no names, so the pattern '{pattern}' "
                                      f"matches nothing; name them with the {noun} attribute "
                                      f"{{{ARG_NAME_ATTR} = \"...\"}} or refer to them by position")
            return []
        close = closest(pattern, known)
        hint = f" (closest names: {', '.join(repr(c) for c in close)})" if close else ""
        self.error(func.location, f"{label}: the pattern '{pattern}' matches no {noun} of {where}{hint}; "
                                  f"'*' matches any characters, dots included; its {noun}s are named: "
                                  f"{', '.join(known)}")
        return []

    def resolve_name(self, func: ir.Operation, kind: str, name: str, label: str) -> int | None:
        """The position of the argument (or result) of `func` named `name` (`slicer.name`), or None after
        reporting why there is none (listing the names there are)."""
        names = self.names(func, kind)
        noun = "argument" if kind == "arg" else "result"
        where = f"@{function_name(func)}"
        positions = [i for i, n in enumerate(names) if n == name]
        if len(positions) == 1:
            return positions[0]
        if positions:
            self.error(func.location, f"{label}: {len(positions)} {noun}s of {where} are named '{name}' "
                                      f"(#{', #'.join(map(str, positions))}); refer to one by position ({kind}I)")
            return None
        known = [n for n in names if n is not None]
        if not known:
            self.error(func.location, f"{label}: the {noun}s of {where} carry no names, so '{name}' names nothing; "
                                      f"refer to them by position ({kind}0..{kind}{len(names) - 1}), or name them "
                                      f"with the {noun} attribute {{{ARG_NAME_ATTR} = \"...\"}}")
            return None
        hint = ""
        base, _, dim = name.rpartition(".")
        if dim.isdigit() and base in known:
            hint = f" ('{base}' is; a replicated value has no dim: write {base}=replicated)"
        close = difflib.get_close_matches(name, known, n=3)
        if close and not hint:
            hint = f" (did you mean {', '.join(repr(c) for c in close)}?)"
        self.error(func.location, f"{label}: {where} has no {noun} named '{name}'{hint}; its {noun}s are named: "
                                  f"{', '.join(known)}")
        return None

    def entry_function(self) -> ir.Operation | None:
        try:
            return entry_function(self.module, self.entry)
        except EntryError as exc:
            self.error(self.module.location, f"tactics refer to a function by its arguments' positions, but {exc}")
            return None

    def schedule_mesh(self, location: ir.Location) -> str | None:
        """The name of the mesh the schedule's axes belong to (maybe a mesh to insert)."""
        asked = self.asked_mesh
        declared = ", ".join("@" + m for m in self.meshes) or "none"
        if asked is None:
            if len(self.meshes) == 1:
                return next(iter(self.meshes))
            if not self.meshes:
                self.error(location, "tactics need a mesh and the module declares no slicer.mesh: give one "
                                     "(apply_tactics(..., mesh={'x': 2, 'y': 4}), or the pass option mesh=x=2,y=4)")
            else:
                self.error(location, f"tactics need a mesh and the module declares {len(self.meshes)} "
                                     f"({declared}): name one with mesh=")
            return None
        if isinstance(asked, str):
            name = asked.lstrip("@")
            if name in self.meshes:
                return name
            self.error(location, f"mesh @{name} is not declared in the module (declared meshes: {declared})")
            return None
        try:
            wanted = asked if isinstance(asked, Mesh) else Mesh(asked)
        except MeshError as exc:
            self.error(location, f"mesh={asked!r}: {exc}")
            return None
        for name, declared_mesh in self.meshes.items():
            if declared_mesh == wanted:
                return name
        if not self.meshes:
            self.new_mesh = wanted
            self.meshes[NEW_MESH_NAME] = wanted
            return NEW_MESH_NAME
        self.error(location, f"no declared mesh has axes {wanted} (declared meshes: {declared}); "
                             "pass the name of a declared mesh as mesh=")
        return None


def _tactic_label(kind: str, index: int, tile) -> str:
    target = {"arg": index} if kind == "arg" else {"result": index}
    return str(Tile(**target, dim=tile[0], axes=tile[1]) if tile else Replicate(**target))



def _without_repeats(requests: list[TacticRequest]) -> list[TacticRequest]:
    """`requests` without those repeating an earlier one on the same target (the same tile, or a replicate):
    asking twice is asking once, so strategies composed by concatenation may both tile the inputs."""
    seen, kept = set(), []
    for request in requests:
        mark = (request.key, request.tile)
        if mark not in seen:
            seen.add(mark)
            kept.append(request)
    return kept
