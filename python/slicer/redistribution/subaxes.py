"""Sub-axes: a mesh axis of size ``n = a * b`` acting as a major part of size ``a`` and a minor part of size
``b`` (and so on, as far as the sizes factor).

Text form (Shardy's): ``y:(m)k`` is the part of axis ``y`` of size ``k`` whose *pre-size* is ``m``, the
product of the sizes of the parts more major than it. A device's coordinate along it is
``(idx(y) // (n / (m k))) % k``. On ``y=4``: ``y:(1)2`` is the major half (``idx(y) // 2``) and ``y:(2)2``
the minor half (``idx(y) % 2``); ``[y:(1)2, y:(2)2]`` (major to minor, in one dim) is ``y`` itself, and
types are kept in that merged form (``canonical``). A bare name is the whole axis (``y`` = ``y:(1)4``).
The parser also accepts Shardy's quoted form ``"y":(1)2``.

Every *token* (an axis or a sub-axis) is a string, so the types, the steps and the JSON keep their shape.
Two sub-axes of one axis may appear in the same type only if they do not overlap and the more major one
ends where a factor of the other's pre-size does (``y:(1)2`` and ``y:(4)2`` on ``y=8`` are fine; on
``y=12``, ``y:(1)2`` and ``y:(3)2`` are not independent and are refused).

The search itself never sees tokens: `Refinement` maps a mesh whose axes are split into parts to a mesh of
plain axes (one per part, same device ranks, since a row-major refinement of an axis keeps every linear
rank) and maps types and steps back to tokens.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from functools import cache, lru_cache

from slicer.core.errors import MeshError, RedistributionError
from slicer.core.mesh import Mesh

SUB_AXIS = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*):\((\d+)\)(\d+)$")


def token(name: str, pre: int, size: int, whole: int) -> str:
    """The text of the part of ``name`` (of size ``whole``) with pre-size ``pre`` and size ``size``."""
    return name if pre == 1 and size == whole else f"{name}:({pre}){size}"


@cache
def split_token(text: str) -> tuple[str, int, int | None]:
    """``"y:(2)2"`` -> ``("y", 2, 2)``; a bare name -> ``(name, 1, None)`` (the whole axis)."""
    m = SUB_AXIS.match(text)
    if m is None:
        return text, 1, None
    return m.group(1), int(m.group(2)), int(m.group(3))


def axis_name(text: str) -> str:
    return split_token(text)[0]


def is_sub_axis(text: str) -> bool:
    return split_token(text)[2] is not None


def token_error(mesh: Mesh, text: str) -> str | None:
    """Why ``text`` names no axis or sub-axis of ``mesh`` (None if it does)."""
    name, pre, size = split_token(text)
    if not mesh.has_axis(name):
        return f"unknown mesh axis '{name}'"
    if size is None:
        return None
    n = mesh.size(name)
    if pre < 1 or size < 2 or n % (pre * size):
        return (f"sub-axis '{text}' does not fit axis '{name}' of size {n}: in '{name}:(m)k' the pre-size m times "
                f"the size k (at least 2) must divide {n}")
    return None


def check_token(mesh: Mesh, text: str, message) -> None:
    """Raise if ``text`` names no axis or sub-axis of ``mesh``: `MeshError` for an unknown mesh axis (as
    `Mesh` itself raises), else `RedistributionError`; ``message(problem)`` is the error's text."""
    problem = token_error(mesh, text)
    if problem:
        if not mesh.has_axis(split_token(text)[0]):
            raise MeshError(message(problem))
        raise RedistributionError(message(problem))


@lru_cache(maxsize=1 << 16)
def extent(mesh: Mesh, text: str) -> tuple[str, int, int, int]:
    """``(axis name, pre-size, size, stride)``: the coordinate along ``text`` is ``(idx // stride) % size``."""
    name, pre, size = split_token(text)
    n = mesh.size(name)
    if size is None:
        return name, 1, n, 1
    return name, pre, size, n // (pre * size)


def size(mesh: Mesh, text: str) -> int:
    """Number of devices along the axis or sub-axis ``text``."""
    return mesh.size(text) if ":" not in text else extent(mesh, text)[2]


def group_size(mesh: Mesh, texts: Iterable[str]) -> int:
    """Number of devices in a group over the tokens ``texts`` (whole axes looked up directly: hashing the
    mesh for the cache of `extent` costs more than the lookup)."""
    out = 1
    for t in texts:
        out *= mesh.size(t) if ":" not in t else extent(mesh, t)[2]
    return out


def order_key(mesh: Mesh, text: str) -> tuple[int, int]:
    """Mesh order of tokens: by axis, then major parts first (how partial axes are listed)."""
    name, pre, _, _ = extent(mesh, text)
    return mesh.axis_index(name), pre


def overlap_error(mesh: Mesh, texts: Sequence[tuple[str, str]], text: str) -> str | None:
    """Why the tokens ``texts`` ((token, where) pairs) of the type ``text`` cannot share one type: two of
    them cover a common part of an axis, or two parts of an axis are not independent. None if they can."""
    by_axis: dict[str, list] = {}
    for text, where in texts:
        name, pre, k, _ = extent(mesh, text)
        by_axis.setdefault(name, []).append((pre, pre * k, text, where))
    for name, parts in by_axis.items():
        parts.sort()
        for (_pre1, end1, t1, w1), (pre2, _end2, t2, w2) in zip(parts, parts[1:]):
            if end1 > pre2:
                what = f"mesh axis '{t1}' is used twice" if t1 == t2 else f"mesh axes '{t1}' and '{t2}' overlap"
                why = ("a partial-sum axis cannot also tile a dim" if "partial" in (w1, w2) and w1 != w2
                       else "an axis (or any part of it) may tile at most one dim, once")
                return f"{what} in {text} ({w1} and {w2}): {why}"
            if pre2 % end1:
                return (f"sub-axes '{t1}' ({w1}) and '{t2}' ({w2}) of axis '{name}' in {text} are not independent: "
                        f"the pre-size {pre2} of the minor one must be a multiple of {end1}, where the major one ends")
    return None


def canonical(mesh: Mesh, texts: Sequence[str]) -> tuple[str, ...]:
    """Merge adjacent parts of an axis that are contiguous, major then minor (``y:(1)2, y:(2)2`` -> ``y``)."""
    if not any(is_sub_axis(t) for t in texts):
        return tuple(texts)
    out: list[tuple[str, int, int]] = []
    for text in texts:
        name, pre, k, _ = extent(mesh, text)
        if out and out[-1][0] == name and out[-1][1] * out[-1][2] == pre:
            prev = out.pop()
            out.append((name, prev[1], prev[2] * k))
        else:
            out.append((name, pre, k))
    return tuple(token(name, pre, k, mesh.size(name)) for name, pre, k in out)


def canonical_set(mesh: Mesh, texts: Iterable[str]) -> tuple[str, ...]:
    """An unordered set of tokens (partial axes) in mesh order, contiguous parts merged."""
    return canonical(mesh, sorted(texts, key=lambda t: order_key(mesh, t)))


def atoms(mesh: Mesh, texts: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """The coarsest common refinement of ``texts``: each token -> its parts (major to minor) between the
    boundaries that any token of the same axis draws. Raises if two tokens are not compatible."""
    bounds: dict[str, set] = {}
    texts = list(dict.fromkeys(texts))
    for text in texts:
        name, pre, k, _ = extent(mesh, text)
        bounds.setdefault(name, {1, mesh.size(name)}).update((pre, pre * k))
    chains = {}
    for name, points in bounds.items():
        chain = sorted(points)
        for a, b in zip(chain, chain[1:]):
            if b % a:
                raise RedistributionError(
                    f"sub-axes of '{name}' with boundaries at {a} and {b} are not compatible: {b} is not a multiple "
                    f"of {a}")
        chains[name] = chain
    out = {}
    for text in texts:
        name, pre, k, _ = extent(mesh, text)
        chain = chains[name]
        n = mesh.size(name)
        i, j = chain.index(pre), chain.index(pre * k)
        out[text] = tuple(token(name, chain[p], chain[p + 1] // chain[p], n) for p in range(i, j)) or (text,)
    return out


def expand(parts: dict[str, tuple[str, ...]], texts: Iterable[str]) -> tuple[str, ...]:
    """``texts`` with every token replaced by its parts (see `atoms`)."""
    return tuple(a for t in texts for a in parts[t])


def factors(n: int) -> tuple[int, ...]:
    """Prime factors of ``n`` in increasing order."""
    out, p = [], 2
    while n > 1 and p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return tuple(out)


class Refinement:
    """``mesh`` with some axes split into parts (``splits``: axis -> part sizes, major to minor, product =
    the axis size) as a mesh of plain axes, ``fine``: same device ranks, since splitting an axis row-major
    keeps every linear rank. Maps types and axis lists between the two."""

    def __init__(self, mesh: Mesh, splits: dict[str, tuple[int, ...]]):
        self.mesh = mesh
        self.splits = {a: tuple(s) for a, s in splits.items() if len(s) > 1}
        taken = set(mesh.axis_names)
        axes, self.part_token, self.parts = [], {}, {}
        for name, n in mesh.axes:
            sizes = self.splits.get(name, (n,))
            assert math.prod(sizes) == n, (name, sizes)
            names = []
            pre = 1
            for i, k in enumerate(sizes):
                fine = name if len(sizes) == 1 else _fresh(f"{name}_{i}", taken)
                taken.add(fine)
                names.append(fine)
                self.part_token[fine] = token(name, pre, k, n)
                axes.append((fine, k))
                pre *= k
            self.parts[name] = tuple(names)
        self.fine = Mesh(axes)
        self._down: dict = {}

    @property
    def trivial(self) -> bool:
        return not self.splits

    def down_axes(self, texts: Iterable[str]) -> tuple[str, ...]:
        """Tokens of ``mesh`` -> names of ``fine`` (each token must be a run of parts)."""
        out: list = []
        for text in texts:
            parts = self._down.get(text)
            if parts is None:
                name, pre, k, _ = extent(self.mesh, text)
                parts, p = [], 1
                for fine in self.parts[name]:
                    size = self.fine.size(fine)
                    if pre <= p and p * size <= pre * k:
                        parts.append(fine)
                    p *= size
                if group_size(self.fine, parts) != k:
                    raise RedistributionError(f"internal: {text} does not align with the parts of '{name}'")
                parts = self._down[text] = tuple(parts)
            out.extend(parts)
        return tuple(out)

    def up_axes(self, names: Iterable[str], merge: bool = True) -> tuple[str, ...]:
        """Names of ``fine`` -> tokens of ``mesh`` (contiguous parts merged)."""
        texts = tuple(self.part_token[n] for n in names)
        return canonical(self.mesh, texts) if merge else texts


def _fresh(name: str, taken: set) -> str:
    while name in taken:
        name += "_"
    return name


def boundaries(mesh: Mesh, texts: Iterable[str]) -> dict[str, set]:
    """Per axis, the pre-sizes at which the tokens ``texts`` cut it (beyond 1 and its size)."""
    out: dict[str, set] = {}
    for text in texts:
        name, pre, k, _ = extent(mesh, text)
        n = mesh.size(name)
        out.setdefault(name, set()).update(p for p in (pre, pre * k) if 1 < p < n)
    return out


def splits_at(mesh: Mesh, cuts: dict[str, set]) -> dict[str, tuple[int, ...]]:
    """Part sizes of each axis cut at the pre-sizes ``cuts`` (which must form a divisibility chain)."""
    out = {}
    for name, points in cuts.items():
        chain = sorted(set(points) | {1, mesh.size(name)})
        if len(chain) > 2:
            out[name] = tuple(b // a for a, b in zip(chain, chain[1:]))
    return out
