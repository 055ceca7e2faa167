"""Checking a module's requests before anything is rewritten: the target exists and is a ranked static tensor,
the mesh and its axes exist, the dim is in range and divides (or is tiled over one axis: padded blocks), no dim
is tiled twice, no axis used twice on one value, no value both tiled and replicated. Every problem is reported,
located and naming the tactic (docs/tactics.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mlir import ir

from slicer.core.errors import Located
from slicer.core.functions import function_name, function_type
from slicer.core.mesh import Mesh
from slicer.dialect import AnnotateOp

from .requests import TacticRequest


def check_requests(requests: list[TacticRequest], meshes: dict[str, Mesh]) -> list[Located]:
    """Every problem of `requests`, in order, over the module's `meshes` (declared or to insert)."""
    checker = _RequestChecker(meshes)
    checker.check(requests)
    return checker.errors


@dataclass
class TargetState:
    """What earlier tactics did to one value: tiled dims (dim -> axes) or replicated."""

    dims: dict[int, tuple[str, ...]] = field(default_factory=dict)
    replicated: bool = False

    def describe(self) -> str:
        return ", ".join(f"dim {d} over {','.join(a)}" for d, a in sorted(self.dims.items()))


class _RequestChecker:
    def __init__(self, meshes: dict[str, Mesh]):
        self.meshes = meshes
        self.errors: list[Located] = []

    def error(self, location: ir.Location, message: str) -> None:
        self.errors.append(Located(location, message))

    def check(self, requests: list[TacticRequest]) -> None:
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

    def target_type(self, request: TacticRequest) -> ir.RankedTensorType | None:
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

    def check_replicate(self, request: TacticRequest, state: TargetState) -> None:
        if request.mesh not in self.meshes:
            return self.unknown_mesh(request)
        if state.dims:
            return self.error(request.location, f"{request.label}: {request.what()} is already tiled "
                                                f"({state.describe()}) by an earlier tactic; a value is either "
                                                "tiled or replicated, drop one of the two")
        state.replicated = True

    def check_tile(self, request: TacticRequest, type_: ir.RankedTensorType, state: TargetState) -> None:
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

    def unknown_mesh(self, request: TacticRequest) -> None:
        declared = ", ".join("@" + m for m in self.meshes) or "none"
        self.error(request.location, f"{request.label}: unknown mesh @{request.mesh} (declared meshes: {declared})")
