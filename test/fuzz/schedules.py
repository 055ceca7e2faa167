"""Random meshes and tactics ("schedules") for a program, mostly valid, sometimes not.

A mesh is 1-3 named axes (x, y, z, in some order) with 1-8 devices in all. A
schedule is 0-4 tactics, each `slicer.Tile(arg=i|result=i, dim=d, axes=...)` or
`slicer.Replicate(...)`, kept here as plain `TacticSpec` values (JSON-able,
buildable into slicer's values). About 85% of the tactics are *valid*: the
target exists, the dim exists, the axes exist and are distinct, and their
product divides the dim, or the dim is tiled over one axis that does not divide
it (padded blocks of ceil(n/k): docs/partition.md, "Uneven shapes"; about a
fifth of the valid tiles). The others are wrong in one of several ways, to
exercise the error paths. `schedule_valid` recomputes validity from the
program and mesh alone.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from .programs import Program
from .source import Source

AXIS_NAMES = ("x", "y", "z")
AXIS_SIZES = (2, 3, 4, 1)  # simplest first
MAX_DEVICES = 8


@dataclass(frozen=True)
class TacticSpec:
    kind: str  # "tile" | "replicate"
    target: str  # "arg" | "result"
    index: int
    dim: int | None = None
    axes: tuple[str, ...] = ()

    def build(self):
        """The slicer tactic value (may raise slicer.InvalidTactic, which is part of what is tested)."""
        import slicer

        if self.kind == "replicate":
            return slicer.Replicate(**{self.target: self.index})
        return slicer.Tile(**{self.target: self.index}, dim=self.dim, axes=tuple(self.axes))

    def text(self) -> str:
        if self.kind == "replicate":
            return f"{self.target}{self.index}=replicated"
        return f"{self.target}{self.index}.{self.dim}={','.join(self.axes)}"

    def python(self) -> str:
        if self.kind == "replicate":
            return f"slicer.Replicate({self.target}={self.index})"
        axes = repr(self.axes[0]) if len(self.axes) == 1 else repr(tuple(self.axes))
        return f"slicer.Tile({self.target}={self.index}, dim={self.dim}, axes={axes})"

    def to_json(self) -> dict:
        return {"kind": self.kind, "target": self.target, "index": self.index, "dim": self.dim,
                "axes": list(self.axes)}

    @staticmethod
    def from_json(d: dict) -> TacticSpec:
        return TacticSpec(d["kind"], d["target"], d["index"], d.get("dim"), tuple(d.get("axes", ())))


def mesh_text(mesh: dict[str, int]) -> str:
    return ",".join(f"{a}={s}" for a, s in mesh.items())


def targets(program: Program) -> list[tuple[str, int, tuple[int, ...]]]:
    return ([("arg", i, tuple(s)) for i, s in enumerate(program.arg_shapes)]
            + [("result", i, tuple(s)) for i, s in enumerate(program.result_shapes)])


def tactic_problem(program: Program, mesh: dict[str, int], t: TacticSpec) -> str | None:
    """None if `t` is valid on its own for `program` and `mesh`, else why not."""
    shapes = dict(((k, i), s) for k, i, s in targets(program))
    if (t.target, t.index) not in shapes:
        return f"{t.target} {t.index} does not exist"
    if t.kind == "replicate":
        return None
    shape = shapes[(t.target, t.index)]
    if t.dim is None or not 0 <= t.dim < len(shape):
        return f"dim {t.dim} out of range for rank {len(shape)}"
    if not t.axes:
        return "no axes"
    if len(set(t.axes)) != len(t.axes):
        return "an axis is listed twice"
    if any(a not in mesh for a in t.axes):
        return "unknown axis"
    product = math.prod(mesh[a] for a in t.axes)
    if shape[t.dim] % product and len(t.axes) > 1:
        return f"size {shape[t.dim]} not divisible by {product} (uneven over more than one axis)"
    return None


def conflict(earlier, t: TacticSpec) -> str | None:
    """None if `t` is compatible with the `earlier` tactics *on the same value* (each dim tiled by one tactic,
    each axis used once per value, a value either tiled or replicated), else why not. Tactics on different
    values may disagree: the docs say the earlier tactic wins and the later point is redistributed."""
    same = [e for e in earlier if (e.target, e.index) == (t.target, t.index)]
    if not same:
        return None
    if t.kind == "replicate" or any(e.kind == "replicate" for e in same):
        return "a value both tiled and replicated" if any(e.kind != t.kind for e in same) else None
    if any(e.dim == t.dim for e in same):
        return "a dim tiled by two tactics"
    if any(set(e.axes) & set(t.axes) for e in same):
        return "an axis tiling two dims of one value"
    return None


def schedule_valid(program: Program, mesh: dict[str, int], tactics) -> bool:
    """Every tactic well-formed (dividing its dim, or over one axis), and the tactics on each value compatible."""
    return all(tactic_problem(program, mesh, t) is None and conflict(tactics[:i], t) is None
               for i, t in enumerate(tactics))


def generate_mesh(src: Source) -> dict[str, int]:
    n = src.integer(1, 3)
    names = list(AXIS_NAMES[:n]) if not src.boolean(0.3) else src.permutation(AXIS_NAMES)[:n]
    mesh, devices = {}, 1
    for name in names:
        sizes = [s for s in AXIS_SIZES if devices * s <= MAX_DEVICES]
        size = src.choice(sizes)
        mesh[name] = size
        devices *= size
    return mesh


def _axis_tuples(mesh: dict[str, int]) -> list[tuple[str, ...]]:
    axes = list(mesh)
    out = []
    for k in range(1, len(axes) + 1):
        out += list(itertools.permutations(axes, k))
    return out


def generate_tactic(src: Source, program: Program, mesh: dict[str, int], earlier=()) -> TacticSpec:
    tg = targets(program)
    if src.boolean(0.08):
        kind, i, _ = src.choice(tg)
        return TacticSpec("replicate", kind, i)
    tuples = _axis_tuples(mesh)

    uneven = src.boolean(0.2)  # a valid tile over one axis that does not divide the dim (padded blocks)

    def divisible(shape, dim, kind=None, i=None):
        return [a for a in tuples if (shape[dim] % math.prod(mesh[x] for x in a) != 0 if uneven
                                      else shape[dim] % math.prod(mesh[x] for x in a) == 0)
                and (not uneven or len(a) == 1)
                and (kind is None or conflict(earlier, TacticSpec("tile", kind, i, dim, a)) is None)]

    def indivisible(shape, dim):
        return [a for a in tuples if shape[dim] % math.prod(mesh[x] for x in a) != 0 and len(a) > 1]

    if not src.boolean(0.15):  # valid
        options = [(k, i, s) for k, i, s in tg if any(divisible(s, d, k, i) for d in range(len(s)))]
        if not options and uneven:  # no dim that one axis leaves uneven: an even tile instead
            uneven = False
            options = [(k, i, s) for k, i, s in tg if any(divisible(s, d, k, i) for d in range(len(s)))]
        if options:
            kind, i, shape = src.choice(options)
            dim = src.choice([d for d in range(len(shape)) if divisible(shape, d, kind, i)])
            return TacticSpec("tile", kind, i, dim, src.choice(divisible(shape, dim, kind, i)))
    # invalid, in one of several ways
    how = src.choice(("indivisible", "unknown-axis", "dim-range", "index-range", "repeated-axis", "no-axes"))
    kind, i, shape = src.choice(tg)
    rank = len(shape)
    if how == "indivisible":
        options = [(k, j, s, d) for k, j, s in tg for d in range(len(s)) if indivisible(s, d)]
        if options:
            kind, i, shape, dim = src.choice(options)
            return TacticSpec("tile", kind, i, dim, src.choice(indivisible(shape, dim)))
        how = "unknown-axis"
    if how == "unknown-axis":
        return TacticSpec("tile", kind, i, src.integer(0, max(rank - 1, 0)), ("w",))
    if how == "dim-range":
        return TacticSpec("tile", kind, i, rank, (src.choice(list(mesh)),))
    if how == "index-range":
        count = sum(1 for k, _, _ in tg if k == kind)
        return TacticSpec("tile", kind, count, 0, (src.choice(list(mesh)),))
    if how == "repeated-axis":
        a = src.choice(list(mesh))
        return TacticSpec("tile", kind, i, src.integer(0, max(rank - 1, 0)), (a, a))
    return TacticSpec("tile", kind, i, src.integer(0, max(rank - 1, 0)), ())


def generate_schedule(src: Source, program: Program) -> tuple[dict[str, int], list[TacticSpec]]:
    mesh = generate_mesh(src)
    tactics: list[TacticSpec] = []
    for _ in range(src.weighted([(1, 0), (4, 1), (3, 2), (2, 3), (2, 4)])):
        tactics.append(generate_tactic(src, program, mesh, tactics))
    return mesh, tactics
