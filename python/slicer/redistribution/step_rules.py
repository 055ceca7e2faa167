"""The checks and type edits the collectives' typing rules (`steps`) are made of.

Each check raises :class:`RedistributionError` saying which collective, which field and what to change (an
unknown mesh axis is a `MeshError`, as everywhere). Types are ``DistType``; ``axes`` are mesh axes or
sub-axes, major to minor; a dim is a tensor dim.
"""

from __future__ import annotations

from slicer.core.errors import RedistributionError
from slicer.core.mesh import Mesh

from . import subaxes
from .types import DistType


def check_dim(t: DistType, dim: int, what: str) -> None:
    """``dim`` must be a dim of ``t`` (``what`` names the field)."""
    if not isinstance(dim, int) or not 0 <= dim < t.rank:
        raise RedistributionError(f"{what} {dim} is out of range for {t} of rank {t.rank}")


def check_axes(mesh: Mesh, axes: tuple[str, ...], op: str) -> None:
    """``axes`` must name at least one axis or sub-axis of ``mesh``, none twice, none overlapping."""
    if not axes:
        raise RedistributionError(f"{op}: mesh_axes is empty; name at least one mesh axis")
    if len(set(axes)) != len(axes):
        raise RedistributionError(f"{op}: mesh_axes {list(axes)} repeats an axis")
    for a in axes:
        subaxes.check_token(mesh, a, lambda problem: f"{op}: {problem}; the mesh {mesh} has axes "
                                                     f"{', '.join(mesh.axis_names)}")
    problem = subaxes.overlap_error(mesh, [(a, "mesh_axes") for a in axes], f"[{','.join(axes)}]")
    if problem:
        raise RedistributionError(f"{op}: {problem}")


def common_parts(mesh: Mesh, t: DistType, *groups: tuple[str, ...]) -> dict:
    """The common refinement of ``t``'s tokens and ``groups`` (see `subaxes.atoms`)."""
    texts = [a for d in t.dims for a in d] + list(t.partial) + [a for g in groups for a in g]
    return subaxes.atoms(mesh, texts)


def suffix_cut(mesh: Mesh, t: DistType, dim: int, axes: tuple[str, ...], op: str) -> tuple[str, ...]:
    """The axes of dim ``dim`` that remain once its minor suffix ``axes`` is taken away (raises if ``axes``
    is not a minor suffix of the dim, part by part)."""
    row = t.dims[dim]
    if row[len(row) - len(axes):] == axes and len(axes) <= len(row):
        return row[:len(row) - len(axes)]
    parts = common_parts(mesh, t, axes)
    have, take = subaxes.expand(parts, row), subaxes.expand(parts, axes)
    if len(take) > len(have) or have[len(have) - len(take):] != take:
        raise RedistributionError(
            f"{op}: mesh axes [{','.join(axes)}] are not the finest (last) tiles of dim {dim} in {t}; "
            f"only a minor suffix of [{','.join(row)}] can be gathered")
    return subaxes.canonical(mesh, have[:len(have) - len(take)])


def check_unused(mesh: Mesh, t: DistType, axes: tuple[str, ...], op: str) -> None:
    """``axes`` must not be used by ``t`` (in part, for sub-axes): a slice only tiles by free axes."""
    used = t.used_axes()
    if not any(subaxes.is_sub_axis(a) for a in axes) and not t.has_sub_axes():
        for a in axes:
            if a in used:
                raise RedistributionError(f"{op}: mesh axis '{a}' is already used in {t}; slice only by unused axes")
        return
    places = [(a, "the type") for a in used] + [(a, op) for a in axes]
    if subaxes.overlap_error(mesh, places, str(t)):
        raise RedistributionError(f"{op}: mesh axes [{','.join(axes)}] overlap the axes used in {t}; slice only "
                                  "by unused axes (or unused parts of axes)")


def check_divisible(mesh: Mesh, t: DistType, dim: int, axes: tuple[str, ...], op: str) -> None:
    """The local size of ``dim`` under ``t`` must divide into the group over ``axes``."""
    local = t.local_shape(mesh)[dim]
    k = subaxes.group_size(mesh, axes)
    if local % k:
        raise RedistributionError(
            f"{op}: local size {local} of dim {dim} in {t} is not divisible by {k} = |{','.join(axes)}|")


def appended(mesh: Mesh, row: tuple[str, ...], axes: tuple[str, ...]) -> tuple[str, ...]:
    """A dim's axes ``row`` with ``axes`` appended as its finest tiles (parts of one axis merged)."""
    return subaxes.canonical(mesh, row + axes)


def without_partial(mesh: Mesh, t: DistType, axes: tuple[str, ...], op: str) -> tuple[str, ...]:
    """``t``'s partial axes once ``axes`` are resolved (raises if one of ``axes`` is not partial)."""
    if all(a in t.partial for a in axes):
        return tuple(a for a in t.partial if a not in axes)
    parts = common_parts(mesh, t, axes)
    have = subaxes.expand(parts, t.partial)
    for a in subaxes.expand(parts, axes):
        if a not in have:
            raise RedistributionError(f"{op}: mesh axis '{a}' is not a partial-sum axis of {t}")
    drop = set(subaxes.expand(parts, axes))
    return subaxes.canonical_set(mesh, [a for a in have if a not in drop])


def replace_dim(dims, dim, axes):
    """``dims`` with dim ``dim``'s axes replaced by ``axes``."""
    return tuple(axes if i == dim else d for i, d in enumerate(dims))


def drop_suffix(dims: list, dim: int, axes: tuple[str, ...]) -> bool:
    """Take the minor suffix ``axes`` off ``dims[dim]`` in place (False if it is not the dim's suffix)."""
    row = dims[dim]
    if len(axes) > len(row) or tuple(row[len(row) - len(axes):]) != tuple(axes):
        return False
    del row[len(row) - len(axes):]
    return True
