"""Distributed array types and their single textual form.

A :class:`DistType` is a global ``shape``, for each tensor dim the ordered tuple of mesh axes that tile it
(**major to minor**, the JAX / MLIR ``shard`` convention) and a tuple of partial-sum axes (kept in mesh
order). Offset convention: for a dim tiled by ``[a0, a1, ..., an]`` a device's block index along the dim is
``idx(a0)*|a1|*...*|an| + ... + idx(an)``: the LAST listed axis is the finest tile. Partial over ``z`` means the true
value is the sum over the z-coordinates of the devices' blocks. Mesh axes used by no dim and not partial replicate the
block.

Text form, used by the CLI, JSON, IR attributes and error messages: ``[[x,y],[]]`` and, with partial axes,
``[[x],[]] partial=[z]``. The parser accepts spaces and quotes (``[["x", "y"], []]``).

An entry may also be a *sub-axis* (`subaxes`): ``y:(1)2`` is the major half of an axis ``y`` of size 4,
``y:(2)2`` its minor half (Shardy's notation, also accepted as ``"y":(1)2``), so ``[[x,y:(2)2],[y:(1)2]]``
tiles dim 0 by ``x`` then the minor half of ``y``, and dim 1 by the major half. Types are canonical: parts
of one axis that are adjacent and contiguous in a dim merge back (``[y:(1)2,y:(2)2]`` is ``[y]``), so a type
written with whole axes is only ever printed with whole axes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from slicer.core import dtypes
from slicer.core.errors import RedistributionError
from slicer.core.mesh import Mesh

from . import subaxes


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype of an element type name (``f32``, ``i32``, ...: the table of slicer.core.dtypes)."""
    found = dtypes.numpy_dtype(name)
    if found is None:
        raise RedistributionError(f"dtype '{name}': {dtypes.unsupported(name)}")
    return found


def itemsize(name: str) -> int:
    """Bytes per element of an element type name (the table of slicer.core.dtypes; an error if unsupported)."""
    return numpy_dtype(name).itemsize


def parse_shape(text: str) -> tuple[int, ...]:
    """Parse ``1024x1024`` (also ``1024`` for rank 1) into a tuple of positive ints."""
    text = text.strip()
    if not text:
        raise RedistributionError("empty shape: write it as sizes separated by 'x', e.g. 1024x1024")
    out = []
    for part in text.lower().split("x"):
        try:
            value = int(part.strip())
        except ValueError:
            raise RedistributionError(f"invalid shape '{text}': write sizes separated by 'x', e.g. 1024x1024") from None
        if value <= 0:
            raise RedistributionError(f"invalid shape '{text}': every size must be a positive integer")
        out.append(value)
    return tuple(out)


def format_shape(shape: Sequence[int]) -> str:
    return "x".join(str(s) for s in shape)


def format_dims(dims: Sequence[Sequence[str]], partial: Sequence[str] = ()) -> str:
    text = "[" + ",".join("[" + ",".join(d) + "]" for d in dims) + "]"
    if partial:
        text += " partial=[" + ",".join(partial) + "]"
    return text


@dataclass(frozen=True)
class DistType:
    """A distributed array type (see module docstring). Build validated values with :meth:`of` / :meth:`parse`."""

    shape: tuple[int, ...]
    dims: tuple[tuple[str, ...], ...]
    partial: tuple[str, ...] = ()

    # -- construction -------------------------------------------------------------------------------------
    @classmethod
    def of(cls, mesh: Mesh, shape: Iterable[int], dims: Iterable[Iterable[str]],
           partial: Iterable[str] = ()) -> DistType:
        """Validate against ``mesh`` and canonicalise (partial axes in mesh order)."""
        shape = tuple(int(s) for s in shape)
        dim_axes: tuple[tuple[str, ...], ...] = tuple(tuple(d) for d in dims)
        partial = tuple(partial)
        text = format_dims(dim_axes, partial)
        if any(s <= 0 for s in shape):
            raise RedistributionError(f"shape {format_shape(shape)} has a non-positive size")
        if len(dim_axes) != len(shape):
            raise RedistributionError(
                f"type {text} has {len(dim_axes)} dims but the shape {format_shape(shape) or '()'} has rank "
                f"{len(shape)}: give one axis list per dim, e.g. {format_dims([[] for _ in shape])}")
        places = []
        for d, axes in enumerate(dim_axes):
            for axis in axes:
                subaxes.check_token(mesh, axis, lambda problem, d=d: f"{problem} in dim {d} of {text}: the mesh "
                                                                     f"{mesh} has axes {', '.join(mesh.axis_names)}")
                places.append((axis, f"dim {d}"))
        for axis in partial:
            subaxes.check_token(mesh, axis, lambda problem: f"{problem} in partial=[...] of {text}: the mesh {mesh} "
                                                            f"has axes {', '.join(mesh.axis_names)}")
            places.append((axis, "partial"))
        problem = subaxes.overlap_error(mesh, places, text)
        if problem:
            raise RedistributionError(problem)
        for d, (size, axes) in enumerate(zip(shape, dim_axes)):
            count = subaxes.group_size(mesh, axes)
            if size % count:
                factors = "*".join(f"{a}({subaxes.size(mesh, a)})" for a in axes)
                raise RedistributionError(
                    f"dim {d} of size {size} is not divisible by {count} = {factors} in {text}: "
                    f"use a size that is a multiple of {count} or tile dim {d} by fewer axes")
        dim_axes = tuple(subaxes.canonical(mesh, d) for d in dim_axes)
        partial = subaxes.canonical_set(mesh, partial)
        return cls(shape, dim_axes, partial)

    @classmethod
    def parse(cls, text: str, shape: Iterable[int], mesh: Mesh) -> DistType:
        """Parse the text form (``[[x,y],[]] partial=[z]``) and validate it against ``shape`` and ``mesh``."""
        dims, partial = parse_type_text(text)
        return cls.of(mesh, shape, dims, partial)

    # -- queries ------------------------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return len(self.shape)

    def used_axes(self) -> set[str]:
        """The axes and sub-axes (tokens) the type uses, in dims or as partial sums."""
        return {a for d in self.dims for a in d} | set(self.partial)

    def used_axis_names(self) -> set[str]:
        """The mesh axes the type uses, wholly or in part."""
        return {subaxes.axis_name(a) for a in self.used_axes()}

    def has_sub_axes(self) -> bool:
        return any(subaxes.is_sub_axis(a) for a in self.used_axes())

    def local_shape(self, mesh: Mesh) -> tuple[int, ...]:
        return tuple(s // subaxes.group_size(mesh, d) for s, d in zip(self.shape, self.dims))

    def local_size(self, mesh: Mesh) -> int:
        return math.prod(self.local_shape(mesh))  # (math.prod: a few ints, where np.prod's call costs 10x more)

    def text(self) -> str:
        return format_dims(self.dims, self.partial)

    def __str__(self):
        return self.text()


_TOKEN = re.compile(r"\s*(?:(\[)|(\])|(,)|(?:\"([^\"]*)\"|'([^']*)'|([A-Za-z_][A-Za-z0-9_]*))"
                    r"(?:\s*:\s*\(\s*(\d+)\s*\)\s*(\d+))?)")


def _parse_list(text: str, pos: int, whole: str) -> tuple[list, int]:
    """Parse a bracketed list of names or lists starting at ``text[pos] == '['``."""
    items: list = []
    m = _TOKEN.match(text, pos)
    if not m or not m.group(1):
        raise RedistributionError(f"invalid distributed type '{whole}': expected '[' at position {pos}")
    pos = m.end()
    expect_item = True
    while True:
        m = _TOKEN.match(text, pos)
        if not m:
            raise RedistributionError(
                f"invalid distributed type '{whole}': unexpected text at position {pos}; write e.g. [[x,y],[]]")
        if m.group(2):
            return items, m.end()
        if m.group(3):
            if expect_item:
                raise RedistributionError(f"invalid distributed type '{whole}': unexpected ',' at position {pos}")
            expect_item = True
            pos = m.end()
            continue
        if not expect_item:
            raise RedistributionError(f"invalid distributed type '{whole}': missing ',' at position {pos}")
        if m.group(1):
            sub, pos = _parse_list(text, pos, whole)
            items.append(sub)
        else:
            name = next(g for g in m.groups()[3:6] if g is not None)
            if m.group(7) is not None:  # a sub-axis, y:(m)k
                name = f"{name}:({int(m.group(7))}){int(m.group(8))}"
            items.append(name)
            pos = m.end()
        expect_item = False


def parse_type_text(text: str) -> tuple[tuple[tuple[str, ...], ...], tuple[str, ...]]:
    """Parse ``[[x,y],[]] partial=[z]`` into ``(dims, partial)`` without validation."""
    whole = text
    text = text.strip()
    partial: list = []
    m = re.search(r"\bpartial\s*=", text)
    if m:
        tail = text[m.end():]
        head = text[:m.start()].rstrip().rstrip(",").rstrip()
        plist, end = _parse_list(tail, 0, whole)
        if tail[end:].strip():
            raise RedistributionError(f"invalid distributed type '{whole}': unexpected text after partial=[...]")
        if any(isinstance(p, list) for p in plist):
            raise RedistributionError(f"invalid distributed type '{whole}': partial=[...] lists axis names, "
                                      "e.g. partial=[z]")
        partial = plist
        text = head
    if not text.startswith("["):
        raise RedistributionError(f"invalid distributed type '{whole}': write one axis list per dim, e.g. [[x,y],[]]")
    dims, end = _parse_list(text, 0, whole)
    if text[end:].strip():
        raise RedistributionError(f"invalid distributed type '{whole}': unexpected text after the dims list")
    for d in dims:
        if not isinstance(d, list):
            raise RedistributionError(
                f"invalid distributed type '{whole}': each dim needs its own list of axes, e.g. [[{d}],[]] "
                f"instead of [{d}]")
        if any(isinstance(a, list) for a in d):
            raise RedistributionError(f"invalid distributed type '{whole}': axis lists cannot be nested deeper "
                                      "than [[x],[y]]")
    return tuple(tuple(d) for d in dims), tuple(partial)
