"""The search's candidates: groups of arguments decided together, and for each group and mesh axis the dims it
may tile.

Values that propagation ties together are decided once:
- a parameter and its optimizer state (`exp_avg.<param>`, `momentum.<param>`, ...: same shape, updated
  elementwise together, so any other tiling of the state costs a collective per step);
- the copies of one parameter in every layer (`blocks.0.attn.q.weight`, `blocks.1.attn.q.weight`: names equal
  once their numbers are replaced by `*`, same shape): the same role in the same computation.
A variable of the search is one (group, axis) pair; its value is the dim the axis tiles, or None. Two axes that
choose the same dim tile it together (major to minor, in mesh order).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from slicer.core.mesh import Mesh
from slicer.tactics import Remat, Replicate, Tactic, Tile
from slicer.tactics.patterns import matching

from .cost_model import Tiling
from .sketch import Sketch

_NUMBER = re.compile(r"(?<=\.)\d+(?=\.|$)|^\d+(?=\.)")


@dataclass(frozen=True)
class Group:
    """Arguments decided together: `members` (argument indices, the leading value first), their pattern."""

    key: str
    members: tuple[int, ...]
    shape: tuple[int, ...]
    role: str


def layer_pattern(name: str) -> str:
    """`blocks.3.attn.q.weight` -> `blocks.*.attn.q.weight`."""
    return _NUMBER.sub("*", name)


def make_groups(sketch: Sketch, roles: tuple[str, ...] = (), fixed: frozenset[int] = frozenset()) -> list[Group]:
    """The groups of the arguments the search decides (not `fixed`, not 0-d), in argument order."""
    names = sketch.arg_names
    owner: dict[int, int] = {}  # state argument -> its parameter
    index = {n: i for i, n in enumerate(names)}
    for i, name in enumerate(names):
        kind, _, rest = name.partition(".")
        role = roles[i] if i < len(roles) else ""
        if rest in index and index[rest] != i and (role == "state" or not roles) \
                and sketch.shapes[index[rest]] == sketch.shapes[i] and kind:
            owner[i] = index[rest]
    by_key: dict[tuple, list[int]] = {}
    for i, name in enumerate(names):
        if i in owner or i in fixed or not sketch.shapes[i]:
            continue
        role = roles[i] if i < len(roles) else "argument"
        by_key.setdefault((layer_pattern(name), sketch.shapes[i], role), []).append(i)
    groups = []
    for (key, shape, role), leaders in by_key.items():
        members = list(leaders) + [s for s, p in owner.items() if p in leaders and s not in fixed]
        groups.append(Group(key, tuple(members), shape, role))
    return groups


def options(group: Group, mesh: Mesh, axis: str) -> list[int | None]:
    """The values of the variable (group, axis): None, or a dim `axis` divides."""
    size = mesh.size(axis)
    if size <= 1:
        return [None]
    return [None] + [d for d, extent in enumerate(group.shape) if extent % size == 0 and extent >= size]


def tilings_of(sketch: Sketch, mesh: Mesh, groups: list[Group], choice: dict, fixed: dict[int, Tiling]):
    """Argument tilings from a choice {(group index, axis): dim}, or None when a dim is not divisible by the
    axes that tile it together."""
    tilings = [fixed.get(i, ((),) * len(s)) for i, s in enumerate(sketch.shapes[:sketch.num_args])]
    for g, group in enumerate(groups):
        dims: dict[int, tuple[str, ...]] = {}
        for axis in mesh.axis_names:
            d = choice.get((g, axis))
            if d is not None:
                dims[d] = dims.get(d, ()) + (axis,)
        if not dims:
            continue
        for d, axes in dims.items():
            if len(axes) > 1 and group.shape[d] % mesh.group_size(axes):
                return None
        for m in group.members:
            tilings[m] = tuple(dims.get(d, ()) for d in range(len(sketch.shapes[m])))
    return tuple(tilings)


def tactics_of(sketch: Sketch, groups: list[Group], tilings, named: bool) -> list[Tactic]:
    """The tactics that lay the groups' arguments out as `tilings`: one pattern per group member kind when the
    pattern names exactly the group's arguments, else one tactic per argument (positions when unnamed)."""
    tactics: list[Tactic] = []
    names = sketch.arg_names
    for group in groups:
        kinds: dict[str, list[int]] = {}
        for m in group.members:
            kinds.setdefault(layer_pattern(names[m]), []).append(m)
        for pattern, members in kinds.items():
            tiling = tilings[members[0]]
            if not any(tiling):
                continue
            exact = named and sorted(matching(pattern, names)) == sorted(members)
            targets = [pattern] if exact else [names[m] if named else m for m in members]
            for target in targets:
                tactics += [Tile(arg=target, dim=d, axes=axes) for d, axes in enumerate(tiling) if axes]
    return tactics


def resolve_fixed(sketch: Sketch, tactics: tuple[Tactic, ...]) -> dict[int, Tiling]:
    """The argument tilings the user's own tactics fix (a `Replicate` fixes a whole argument; tactics on
    results fix nothing here, nor does a `Remat`: it places no value)."""
    fixed: dict[int, list] = {}
    for tactic in tactics:
        if isinstance(tactic, Remat) or tactic.arg is None:  # remat places no value
            continue
        targets = [tactic.arg] if isinstance(tactic.arg, int) else matching(tactic.arg, sketch.arg_names)
        for i in targets:
            if not 0 <= i < sketch.num_args:
                continue
            dims = fixed.setdefault(i, [()] * len(sketch.shapes[i]))
            if isinstance(tactic, Tile) and tactic.dim < len(dims):
                dims[tactic.dim] = tuple(tactic.axes)
            elif isinstance(tactic, Replicate):
                fixed[i] = [()] * len(sketch.shapes[i])
    return {i: tuple(dims) for i, dims in fixed.items()}
