"""The context-parallel tactic: attention computed in blocks of the sequence around a mesh axis
(`slicer.strategies.context_parallel`, docs/tactics.md "Context parallelism").

`Tile` asks for the blocks of a value; `ContextParallel` asks for how the step computes its attention: as ring
attention over as many blocks of the sequence as `axis` has devices (`frontends/decomp_ring.py`), so that each
device keeps its queries and the keys and values travel around the axis. `slicer.compile` imports the step
again that way once the mesh is known; the `Tile`s of the sequence dims that come with it lay out the rest.
Its text form:

    context_parallel(axis=c, method=ring)
"""

from __future__ import annotations

from dataclasses import dataclass

from slicer.core.errors import InvalidTactic

CONTEXT_METHODS = ("ring", "all_to_all")


@dataclass(frozen=True)
class ContextParallel:
    """Attention as ring attention over the devices of `axis` (one axis name or several, major to minor)."""

    axes: tuple[str, ...]
    method: str = "ring"

    def __post_init__(self):
        axes = (self.axes,) if isinstance(self.axes, str) else self.axes
        if not isinstance(axes, tuple) or not axes or not all(isinstance(a, str) and a for a in axes):
            raise InvalidTactic(f"context_parallel: axis={self.axes!r} must be a mesh axis name or names")
        object.__setattr__(self, "axes", axes)
        if self.method not in CONTEXT_METHODS:
            raise InvalidTactic(f"context_parallel: method={self.method!r} is not supported; one of "
                                f"{', '.join(CONTEXT_METHODS)}")

    def __str__(self) -> str:
        return f"context_parallel(axis={','.join(self.axes)}, method={self.method})"


__all__ = ["CONTEXT_METHODS", "ContextParallel"]
