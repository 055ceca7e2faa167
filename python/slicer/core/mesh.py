"""Device meshes: ordered, named axes with sizes (JAX-like, immutable, hashable).

Device linear rank <-> mesh coordinate is row-major over the axes in declaration order (first axis most
significant). This matches ``MPI.COMM_WORLD.Create_cart(mesh.shape)`` and the upstream MLIR ``shard`` dialect.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from .errors import MeshError

_AXIS_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def block_size(size: int, count: int) -> int:
    """The block of a dim of `size` tiled over `count` devices: ceil(size / count), torch.chunk's block.
    Device r holds rows [r*c, min(size, (r+1)*c)), padded at its tail to c when `count` does not divide
    `size` (docs/partition.md, "Uneven shapes")."""
    return -(-size // count)


def block_sizes(size: int, count: int) -> list[int]:
    """The valid rows of each of the `count` blocks of a dim of `size` (``7, 4 -> [2, 2, 2, 1]``; a block may
    hold none: ``6, 4 -> [2, 2, 2, 0]``)."""
    c = block_size(size, count)
    return [min(c, max(0, size - r * c)) for r in range(count)]


def _whole_number(size) -> int | None:
    """`size` as an int when it is a whole number (``4.0``, a numpy integer), else None (``2.5``, a bool)."""
    if isinstance(size, bool):
        return None
    try:
        return int(size) if int(size) == size else None
    except (TypeError, ValueError):
        return None


class Mesh:
    """An immutable device mesh, e.g. ``Mesh(x=2, y=4)`` (keyword order = axis order).

    Immutable because its state is two private slots set once by `__init__` and its properties have no
    setters: assigning any attribute raises `AttributeError`.

    Also accepts a sequence of ``(name, size)`` pairs or a mapping: ``Mesh([("x", 2), ("y", 4)])``.
    """

    __slots__ = ("_axes", "_index")
    _axes: tuple[tuple[str, int], ...]
    _index: dict[str, int]

    def __init__(self, axes: Iterable[tuple[str, int]] | Mapping[str, int] | None = None, /, **sizes: int):
        if axes is not None and sizes:
            raise MeshError("Mesh(): give the axes either as pairs/mapping or as keywords, not both")
        items: list[tuple]
        if axes is None:
            items = list(sizes.items())
        elif isinstance(axes, Mapping):
            items = list(axes.items())
        else:
            try:
                items = [tuple(pair) for pair in axes]
            except TypeError as exc:
                raise MeshError(f"Mesh(): expected (name, size) pairs, got {axes!r}") from exc
        seen: set[str] = set()
        checked = []
        for pair in items:
            if len(pair) != 2:
                raise MeshError(f"Mesh(): expected (name, size) pairs, got {pair!r}")
            name, size = pair
            if not isinstance(name, str) or not _AXIS_NAME.match(name):
                raise MeshError(
                    f"invalid mesh axis name {name!r}: use an identifier such as 'x' or 'data' "
                    "(letters, digits, underscores; not starting with a digit)")
            if name in seen:
                raise MeshError(f"duplicate mesh axis name '{name}': give every axis a distinct name")
            if isinstance(size, bool) or not isinstance(size, int):
                whole = _whole_number(size)
                if whole is None:
                    raise MeshError(f"mesh axis '{name}' has size {size!r}: sizes must be positive integers")
                size = whole
            if size <= 0:
                raise MeshError(
                    f"mesh axis '{name}' has size {size}: sizes must be positive integers (use 1 for a trivial axis)")
            seen.add(name)
            checked.append((name, size))
        object.__setattr__(self, "_axes", tuple(checked))
        object.__setattr__(self, "_index", {name: i for i, (name, _) in enumerate(checked)})

    @classmethod
    def parse(cls, text: str) -> Mesh:
        """Parse ``"x=2,y=4"`` (spaces allowed)."""
        text = text.strip()
        if not text:
            raise MeshError("empty mesh: write axes as name=size, e.g. 'x=2,y=4'")
        pairs = []
        for part in text.split(","):
            if "=" not in part:
                raise MeshError(f"invalid mesh axis '{part.strip()}' in '{text}': write name=size, e.g. 'x=2'")
            name, size = (s.strip() for s in part.split("=", 1))
            try:
                value = int(size)
            except ValueError:
                raise MeshError(
                    f"mesh axis '{name}' has size '{size}' in '{text}': sizes must be positive integers") from None
            pairs.append((name, value))
        return cls(pairs)

    @property
    def axes(self) -> tuple[tuple[str, int], ...]:
        return self._axes

    @property
    def axis_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self._axes)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(size for _, size in self._axes)

    @property
    def ndim(self) -> int:
        return len(self._axes)

    @property
    def device_count(self) -> int:
        count = 1
        for _, size in self._axes:
            count *= size
        return count

    def has_axis(self, axis: str) -> bool:
        return axis in self._index

    def axis_index(self, axis: str) -> int:
        try:
            return self._index[axis]
        except KeyError:
            raise MeshError(
                f"unknown mesh axis '{axis}': the mesh has axes {', '.join(self.axis_names) or '(none)'}") from None

    def size(self, axis: str) -> int:
        return self._axes[self.axis_index(axis)][1]

    def group_size(self, axes: Iterable[str]) -> int:
        count = 1
        for axis in axes:
            count *= self.size(axis)
        return count

    def without(self, axes: Iterable[str]) -> Mesh:
        """The mesh of the other axes (in order); unknown names are an error."""
        drop = set(axes)
        for axis in drop:
            self.axis_index(axis)
        return Mesh([(name, size) for name, size in self._axes if name not in drop])

    def coords(self, rank: int) -> tuple[int, ...]:
        """Mesh coordinate of a linear rank (row-major, first axis most significant)."""
        if not 0 <= rank < self.device_count:
            raise MeshError(f"rank {rank} is outside the mesh {self} of {self.device_count} devices")
        out = []
        for size in reversed(self.shape):
            out.append(rank % size)
            rank //= size
        return tuple(reversed(out))

    def rank(self, coords: Iterable[int]) -> int:
        coords = tuple(coords)
        if len(coords) != self.ndim or any(not 0 <= c < s for c, s in zip(coords, self.shape)):
            raise MeshError(f"coordinate {coords} is outside the mesh {self}")
        rank = 0
        for c, size in zip(coords, self.shape):
            rank = rank * size + c
        return rank

    def __eq__(self, other):
        return isinstance(other, Mesh) and self._axes == other._axes

    def __hash__(self):
        return hash(("Mesh", self._axes))

    @classmethod
    def coerce(cls, mesh) -> Mesh:
        """`mesh` as a Mesh: a Mesh, a mapping {axis: size} or text 'x=2,y=2' (the forms the API takes);
        anything else, or a bad size, is a MeshError saying what to give (callers raise it as their own)."""
        try:
            if isinstance(mesh, Mesh):
                return mesh
            if isinstance(mesh, Mapping):
                return cls(dict(mesh))
            if isinstance(mesh, str):
                return cls.parse(mesh)
        except (MeshError, TypeError, ValueError) as exc:
            raise MeshError(f"mesh {mesh!r}: {exc}; give a slicer.Mesh, e.g. slicer.Mesh(x=2, y=2), or "
                            "'x=2,y=2'") from None
        raise MeshError(f"mesh {mesh!r}: give a slicer.Mesh (e.g. slicer.Mesh(x=2, y=2)), a mapping of axis sizes "
                        "or text 'x=2,y=2'")

    def __str__(self):
        return ",".join(f"{name}={size}" for name, size in self._axes)

    def __repr__(self):
        return "Mesh(" + ", ".join(f"{name}={size}" for name, size in self._axes) + ")"
