"""Applying tactics: turn them into an equal program with `slicer.loop`/`slicer.slice`.

The pass `slicer-apply-tactics` and `slicer.apply_tactics` both call `TacticRewriter`.

Sources, applied in this order (docs/tactics.md):
1. IR annotations, function by function in module order: `slicer.sharding` on
   arguments, then on results, then `slicer.annotate` ops in program order. A
   sharding becomes one `Tile` per tiled dim, or one `Replicate` when every dim
   is empty (`[[], []]`).
2. The schedule (`slicer.apply_tactics(..., tactics)` or the `tactics` option,
   `arg0.1=y;result0.0=x,y;arg2=replicated`), on the function `entry`. A target given by name is
   resolved through the `slicer.name` of the arguments (or results); a name pattern (`patterns.py`)
   stands for one request per matching argument (or result), in position order, each labelled
   `<tactic> on '<name>'`; a pattern that matches nothing is an error naming the closest names.

The rewrite of "tile value %v along dim d over axes A" (A major to minor) is
    %v2 = slicer.loop tile<d> over range<A, |A|> { yield slicer.slice(%v, d, r) }
with the other uses of %v redirected to %v2. The loop rebuilds %v from its
blocks, so the program means the same; propagation later pushes the loop into
%v's consumers. Where %v2 goes:
- argument: at the top of the function (after the loops of earlier tactics);
- result: just before `func.return`, which then returns %v2 (other uses of the
  value are left alone);
- `slicer.annotate`: right after it; a tiling annotation is consumed (the loop
  is the record), its result replaced by its source.
Tiling one dim over several axes builds **one loop over the product range**
`!slicer.range<["x", "y"], |x|*|y|>`, not nested loops: the product range is
exactly the dim's axis list of `#slicer.sharding` and of the distributed type,
propagation moves it in one step per dim, and SPMD partitioning maps it directly
to the block index `idx(x) * |y| + idx(y)` (nested loops would mean the same by
the range algebra, at the cost of an intermediate block type and twice the
rewriting). Tiling two dims of one value (two tactics) nests: the later tactic
wraps the value the earlier one produced.

`Replicate` creates no loop: it records the requirement as a `slicer.annotate`
with an all-empty sharding (kept as is when it already is one). `slicer.sharding`
attributes are removed once applied, so running the pass twice equals running it
once.

All requests are checked first (target exists, ranked static tensor, mesh and
axes exist, dim in range and divisible (or tiled over one axis: padded blocks), no dim tiled twice, no axis used twice
on one value, no value both tiled and replicated); every problem is reported at
the function or annotate op and names the tactic, and nothing is rewritten.
A request repeating an earlier one (the same tile of the same value, or a second
replicate) is dropped: asking twice is asking once.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field

from mlir import ir
from mlir.dialects import func as func_d

from slicer.core.errors import Located, MeshError, TacticError
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
    PRIORITY_ATTR,
    RES_ATTRS_ATTR,
    SHARDING_ATTR,
    SHARDING_OPERAND_ATTR,
    TACTIC_ATTR,
)
from slicer.dialect import (
    AnnotateOp,
    RangeType,
    Sharding,
    TileAction,
    annotate,
    find_meshes,
    loop,
    slice_,
    walk_ops,
    yield_,
)
from slicer.dialect import (
    mesh as build_mesh,
)

from .patterns import closest, is_pattern, matching
from .values import Replicate, Tactic, Tile

NEW_MESH_NAME = "mesh"
"""The symbol of the `slicer.mesh` inserted when the module declares none."""

# ----------------------------------------------------------------------------- requests


@dataclass
class Request:
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


@dataclass
class TargetState:
    """What earlier tactics did to one value: tiled dims (dim -> axes) or replicated."""

    dims: dict[int, tuple[str, ...]] = field(default_factory=dict)
    replicated: bool = False

    def describe(self) -> str:
        return ", ".join(f"dim {d} over {','.join(a)}" for d, a in sorted(self.dims.items()))


def _tactic_label(kind: str, index: int, tile) -> str:
    target = {"arg": index} if kind == "arg" else {"result": index}
    return str(Tile(**target, dim=tile[0], axes=tile[1]) if tile else Replicate(**target))


# ----------------------------------------------------------------------------- the rewriter


class TacticRewriter:
    """Collects, checks and applies the IR annotations and a schedule on one module."""

    def __init__(self, module: ir.Operation, tactics: tuple[Tactic, ...] = (), *, mesh=None, entry: str | None = None,
                 after_each: Callable[[str], None] | None = None):
        """`mesh`: None, a declared mesh's name, or a `Mesh` / `{axis: size}` mapping; `after_each(label)` runs
        after each tactic is applied (check-each-step)."""
        self.module = module
        self.after_each = after_each
        self.tactics = tactics
        self.mesh_spec = mesh
        self.entry = entry.lstrip("@") if isinstance(entry, str) and entry else None
        self.errors: list[Located] = []
        self.meshes: dict[str, Mesh] = {}  # declared meshes by symbol name
        self.new_mesh: Mesh | None = None  # to insert as `slicer.mesh @mesh`
        self._names: dict[tuple[str, str], list[str | None]] = {}  # (function, "arg"/"result") -> `names`

    def names(self, func: ir.Operation, kind: str) -> list[str | None]:
        """`value_names(func, kind)`, read once per function and kind: every named tactic resolves against them
        (a training step's schedule names hundreds of arguments, and reading the attributes again for each cost
        a tenth of its compile)."""
        key = (function_name(func), kind)
        if key not in self._names:
            self._names[key] = value_names(func, kind)
        return self._names[key]

    def error(self, location: ir.Location, message: str) -> None:
        self.errors.append(Located(location, message))

    def run(self) -> None:
        with self.module.context:
            for name, view in find_meshes(self.module).items():
                try:
                    self.meshes[name] = view.mesh()
                except ValueError:
                    pass  # malformed mesh (MeshError is a ValueError too): slicer-verify reports it
            requests = _without_repeats(self.annotation_requests() + self.schedule_requests())
            self.check(requests)
            if self.errors:
                raise TacticError(self.errors)
            if self.new_mesh is not None:
                block = self.module.regions[0].blocks[0]
                build_mesh(NEW_MESH_NAME, self.new_mesh, loc=self.module.location,
                           ip=ir.InsertionPoint.at_block_begin(block))
            after_each = (lambda request: self.after_each(request.label)) if self.after_each else None
            _Rewrite(self.meshes).apply(requests, after_each)
            for func in defined_functions(self.module):
                _drop_sharding_attrs(func)

    # -- collecting ----------------------------------------------------------------------

    def annotation_requests(self) -> list[Request]:
        requests: list[Request] = []
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

    def from_sharding(self, attr, type_, kind, index, func, location, origin, annotate_op=None) -> list[Request]:
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
            return [Request(kind, index, None, label(None), func, sharding.mesh, location, annotate_op)]
        return [Request(kind, index, tile, label(tile), func, sharding.mesh, location, annotate_op) for tile in tiles]

    def schedule_requests(self) -> list[Request]:
        if not self.tactics:
            if self.mesh_spec is not None:
                self.schedule_mesh(self.module.location)  # an empty schedule still names the mesh (inserted if new)
            return []
        func = self.entry_function()
        mesh = self.schedule_mesh(func.location if func is not None else self.module.location)
        if func is None or mesh is None:
            return []
        requests = []
        for tactic in self.tactics:
            kind, index = ("arg", tactic.arg) if tactic.arg is not None else ("result", tactic.result)
            tile = (tactic.dim, tactic.axes) if isinstance(tactic, Tile) else None
            if not isinstance(index, str):
                requests.append(Request(kind, index, tile, str(tactic), func, mesh, func.location))
            elif is_pattern(index):
                for position, name in self.expand_pattern(func, kind, index, str(tactic)):
                    requests.append(Request(kind, position, tile, f"{tactic} on '{name}'", func, mesh, func.location,
                                            name=name))
            else:
                position = self.resolve_name(func, kind, index, str(tactic))
                if position is not None:
                    requests.append(Request(kind, position, tile, str(tactic), func, mesh, func.location, name=index))
        return requests

    def expand_pattern(self, func: ir.Operation, kind: str, pattern: str, label: str) -> list[tuple[int, str]]:
        """The (position, name) of every argument (or result) of `func` whose name `pattern` matches, in order; an
        empty list after reporting a pattern that matches nothing (naming the closest names)."""
        names = self.names(func, kind)
        found = [(i, names[i]) for i in matching(pattern, names)]
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
        spec = self.mesh_spec
        declared = ", ".join("@" + m for m in self.meshes) or "none"
        if spec is None:
            if len(self.meshes) == 1:
                return next(iter(self.meshes))
            if not self.meshes:
                self.error(location, "tactics need a mesh and the module declares no slicer.mesh: give one "
                                     "(apply_tactics(..., mesh={'x': 2, 'y': 4}), or the pass option mesh=x=2,y=4)")
            else:
                self.error(location, f"tactics need a mesh and the module declares {len(self.meshes)} "
                                     f"({declared}): name one with mesh=")
            return None
        if isinstance(spec, str):
            name = spec.lstrip("@")
            if name in self.meshes:
                return name
            self.error(location, f"mesh @{name} is not declared in the module (declared meshes: {declared})")
            return None
        try:
            wanted = spec if isinstance(spec, Mesh) else Mesh(spec)
        except MeshError as exc:
            self.error(location, f"mesh={spec!r}: {exc}")
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

    # -- checking ------------------------------------------------------------------------

    def check(self, requests: list[Request]) -> None:
        states: dict[tuple, TargetState] = {}
        for request in requests:
            type_ = self.target_type(request)
            if type_ is None:
                continue
            state = states.setdefault(request.key, TargetState())
            if request.tile is None:
                self.check_replicate(request, state)
            else:
                self.check_tile(request, type_, state)

    def target_type(self, request: Request) -> ir.RankedTensorType | None:
        if request.kind == "value":
            return ir.RankedTensorType(AnnotateOp(request.annotate_op).source.type)
        fn_type = function_type(request.func)
        types = fn_type.inputs if request.kind == "arg" else fn_type.results
        noun = "argument" if request.kind == "arg" else "result"
        plural = noun + ("" if len(types) == 1 else "s")
        if request.index >= len(types):
            valid = f"{request.kind}=0..{len(types) - 1}" if types else "none"
            self.error(request.location, f"{request.label}: @{function_name(request.func)} has {len(types)} {plural} "
                                         f"(valid: {valid})")
            return None
        type_ = types[request.index]
        if not isinstance(type_, ir.RankedTensorType):
            self.error(request.location, f"{request.label}: {request.what()} has type {type_}; "
                                         "tactics apply to ranked tensors only")
            return None
        return type_

    def check_replicate(self, request: Request, state: TargetState) -> None:
        if request.mesh not in self.meshes:
            return self.unknown_mesh(request)
        if state.dims:
            return self.error(request.location, f"{request.label}: {request.what()} is already tiled "
                                                f"({state.describe()}) by an earlier tactic; a value is either "
                                                "tiled or replicated, drop one of the two")
        state.replicated = True

    def check_tile(self, request: Request, type_: ir.RankedTensorType, state: TargetState) -> None:
        dim, axes = request.tile
        label, what, loc = request.label, request.what(), request.location
        if request.mesh not in self.meshes:
            return self.unknown_mesh(request)
        mesh = self.meshes[request.mesh]
        for axis in axes:
            if not mesh.has_axis(axis):
                return self.error(loc, f"{label}: unknown mesh axis '{axis}' (mesh @{request.mesh} has axes "
                                       f"{', '.join(mesh.axis_names)})")
        if dim >= type_.rank:
            return self.error(loc, f"{label}: dim {dim} is out of range: {what} has type {type_} "
                                   f"(rank {type_.rank}, dims 0..{type_.rank - 1})")
        if type_.is_dynamic_dim(dim):
            return self.error(loc, f"{label}: dim {dim} of {what} ({type_}) is dynamic; only static dims can be tiled")
        size, blocks = type_.shape[dim], mesh.group_size(axes)
        if size % blocks and len(axes) != 1:
            # Uneven dims are padded blocks of ceil(size/k) (docs/partition.md, "Uneven shapes") over one axis.
            sizes = " * ".join(f"|{a}|={mesh.size(a)}" for a in axes)
            return self.error(loc, f"{label}: dim {dim} of {what} has size {size}, which is not divisible by "
                                   f"{blocks} ({sizes}); a dim that does not divide is tiled over one mesh axis "
                                   f"only (padded blocks): tile it over one axis or choose axes whose sizes "
                                   f"divide {size}")
        if state.replicated:
            return self.error(loc, f"{label}: {what} is replicated by an earlier tactic; a value is either tiled "
                                   "or replicated, drop one of the two")
        if dim in state.dims:
            both = tuple(state.dims[dim]) + tuple(axes)
            return self.error(loc, f"{label}: dim {dim} of {what} is already tiled over "
                                   f"{','.join(state.dims[dim])} by an earlier tactic; to tile one dim over several "
                                   f"axes give them in one tactic, major to minor (axes={both!r})")
        for other, used in state.dims.items():
            for axis in axes:
                if axis in used:
                    return self.error(loc, f"{label}: mesh axis '{axis}' already tiles dim {other} of {what}; "
                                           "a value can be tiled over each mesh axis once")
        state.dims[dim] = tuple(axes)

    def unknown_mesh(self, request: Request) -> None:
        declared = ", ".join("@" + m for m in self.meshes) or "none"
        self.error(request.location, f"{request.label}: unknown mesh @{request.mesh} (declared meshes: {declared})")


# ----------------------------------------------------------------------------- rewriting


class _Rewrite:
    """Applies checked requests in order (see the module docstring for the shapes produced)."""

    def __init__(self, meshes: dict[str, Mesh]):
        self.meshes = meshes
        self.current: dict[tuple, ir.Value] = {}  # the value consumers see now, per arg/annotate target
        self.anchor: dict[tuple, ir.Operation] = {}  # insert after this op (per function top / annotate)
        self.consumed: list[ir.Operation] = []
        self.replicated: set[tuple] = set()
        self.order = 0  # position of the request being applied in the schedule
        self.result_labels: dict[str, tuple[ir.Operation, dict[int, list[str]]]] = {}  # function name -> labels

    def apply(self, requests: list[Request], after_each=None) -> None:
        """Apply `requests` in order; `after_each(request)` runs after each one (check-each-step)."""
        for order, request in enumerate(requests):
            self.order = order
            if request.tile is None:
                if request.key in self.replicated:
                    continue  # replicating twice is replicating once
                self.replicated.add(request.key)
            loc = ir.Location.name(request.label, childLoc=request.location, context=request.location.context)
            with loc:
                if request.kind == "result":
                    self.rewrite_result(request, loc)
                else:
                    self.rewrite_value(request, loc)
            if after_each is not None:
                self.label_results()
                after_each(request)
        self.label_results()
        for op in self.consumed:
            view = AnnotateOp(op)
            view.result.replace_all_uses_with(view.source)
            op.erase()

    def label_results(self) -> None:
        """Write the labels of the results rewritten so far (`_label_results`)."""
        for func, labels in self.result_labels.values():
            _label_results(func, labels)
        self.result_labels = {}

    def rewrite_value(self, request: Request, loc: ir.Location) -> None:
        """Wrap a function argument (at the function top) or an annotated value (after the annotation)."""
        key = request.key
        if request.kind == "arg":
            block = request.func.regions[0].blocks[0]
            value = self.current.setdefault(key, block.arguments[request.index])
            anchor_key = ("top", function_name(request.func))
            anchor = self.anchor.get(anchor_key)
            ip = ir.InsertionPoint.after(anchor) if anchor is not None else ir.InsertionPoint.at_block_begin(block)
        else:
            op = request.annotate_op
            if request.tile is None:
                return  # already recorded by this very all-empty annotation
            if not self.consumed or self.consumed[-1] != op:
                self.consumed.append(op)
            value = self.current.setdefault(key, op.results[0])
            anchor_key = key
            ip = ir.InsertionPoint.after(self.anchor.get(anchor_key, op))
        if request.tile is None:
            new, built, user = self.replicate(request, value, loc, ip)
        else:
            new, built, user = self.tile(request, value, loc, ip)
        value.replace_all_uses_except(new, user)
        self.current[key] = new
        self.anchor[anchor_key] = built

    def rewrite_result(self, request: Request, loc: ir.Location) -> None:
        """Wrap operand `index` of every `func.return` just before it."""
        for block in request.func.regions[0].blocks:
            term = block.operations[len(block.operations) - 1].operation
            if term.name != func_d.ReturnOp.OPERATION_NAME:
                continue
            value = term.operands[request.index]
            if request.tile is None:
                new, _, _ = self.replicate(request, value, loc, ir.InsertionPoint(term))
            else:
                new, _, _ = self.tile(request, value, loc, ir.InsertionPoint(term))
            term.operands[request.index] = new
        name = function_name(request.func)
        self.result_labels.setdefault(name, (request.func, {}))[1].setdefault(request.index, []).append(request.label)

    def tile(self, request: Request, value: ir.Value, loc, ip) -> tuple[ir.Value, ir.Operation, ir.Operation]:
        """`loop tile<d> over range<axes> { yield slice(value, d, r) }` -> (result, loop op, slice op)."""
        dim, axes = request.tile
        mesh = self.meshes[request.mesh]
        rng = RangeType(tuple(axes), mesh.group_size(axes))
        built = loop([value.type], mesh=request.mesh, action=TileAction(dim), range=rng, loc=loc, ip=ip)
        # Provenance for propagation: which tactic, and its place in the schedule (earlier wins).
        built.operation.attributes[TACTIC_ATTR] = ir.StringAttr.get(request.label)
        built.operation.attributes[PRIORITY_ATTR] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), self.order)
        with ir.InsertionPoint(built.body):
            block = slice_(value, built.range_arg, dim, loc=loc)
            yield_([block], loc=loc)
        return built.results[0], built.operation, block.owner.operation

    def replicate(self, request: Request, value: ir.Value, loc, ip) -> tuple[ir.Value, ir.Operation, ir.Operation]:
        """`slicer.annotate` of `value` with an all-empty sharding -> (result, op, op)."""
        rank = ir.RankedTensorType(value.type).rank
        result = annotate(value, Sharding(request.mesh, ((),) * rank), loc=loc, ip=ip)
        return result, result.owner.operation, result.owner.operation


def _without_repeats(requests: list[Request]) -> list[Request]:
    """`requests` without those repeating an earlier one on the same target (the same tile, or a replicate):
    asking twice is asking once, so strategies composed by concatenation may both tile the inputs."""
    seen, kept = set(), []
    for request in requests:
        mark = (request.key, request.tile)
        if mark not in seen:
            seen.add(mark)
            kept.append(request)
    return kept


def _label_results(func: ir.Operation, labels: dict[int, list[str]]) -> None:
    """Record on each result (its `slicer.tactic`) the tactics that set its layout, so the partitioned function
    says the result was asked for, not left to the default (labels of several tactics are joined, after any the
    result had). All at once: the result attributes are one array, rebuilt whole for any change."""
    count = len(function_type(func).results)
    dicts = ([{a.name: a.attr for a in ir.DictAttr(d)} for d in ir.ArrayAttr(func.attributes[RES_ATTRS_ATTR])]
             if RES_ATTRS_ATTR in func.attributes else [{} for _ in range(count)])
    for index, texts in labels.items():
        before = dicts[index].get(TACTIC_ATTR)
        text = "; ".join(([ir.StringAttr(before).value] if before is not None else []) + texts)
        dicts[index][TACTIC_ATTR] = ir.StringAttr.get(text)
    func.attributes[RES_ATTRS_ATTR] = ir.ArrayAttr.get([ir.DictAttr.get(d) for d in dicts])


def _drop_sharding_attrs(func: ir.Operation) -> None:
    """Remove `slicer.sharding` from argument/result attributes (they are now loops/annotations)."""
    for key in (ARG_ATTRS_ATTR, RES_ATTRS_ATTR):
        if key not in func.attributes:
            continue
        dicts = []
        for attrs in ir.ArrayAttr(func.attributes[key]):
            attrs = ir.DictAttr(attrs)
            dicts.append({a.name: a.attr for a in attrs if a.name != SHARDING_ATTR})
        if any(dicts):
            func.attributes[key] = ir.ArrayAttr.get([ir.DictAttr.get(d) for d in dicts])
        else:
            del func.attributes[key]
