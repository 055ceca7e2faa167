"""What one plan search solves, as the search (`search.py`) and its bounds (`bounds.py`) both read it: a
frozen description of the source and target states, the mesh axes and their layout, the pricing and the memory
cap, built once per plan from the distributed types.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from slicer.core.mesh import Mesh

from .costs import CostModel, Pricing
from .layout import Layout
from .types import DistType


@dataclass(frozen=True, eq=False)
class Problem:
    """What one plan search solves, as `search.PlanSearch` and its `Bounds` both read it: from ``src`` to
    ``dst``, *reduced* states ``(dims, partial)`` (mesh axes of size 1 dropped, plain tuples so that states
    hash fast) of an array of ``shape``, over the non-trivial mesh ``axes`` (``sizes``: every mesh axis's
    size) laid out by ``layout``, with costs in ``pricing``'s integers; with ``cap``, over plans in any
    order whose blocks never exceed ``cap`` elements; ``informed=False`` drops the heuristic."""

    shape: tuple[int, ...]
    src: tuple
    dst: tuple
    axes: tuple[str, ...]
    sizes: dict[str, int]
    layout: Layout
    pricing: Pricing
    cap: int | None = None
    informed: bool = True
    n: int = field(init=False)  # number of devices
    elements: int = field(init=False)  # number of elements of the whole array
    _groups: dict = field(default_factory=dict, init=False, repr=False)  # memo of ``group``

    def __post_init__(self):
        # derived once (frozen, hence set through object): plain attributes, read on every node
        object.__setattr__(self, "n", self.layout.device_count)
        object.__setattr__(self, "elements", math.prod(self.shape))

    @classmethod
    def of(cls, mesh: Mesh, layout: Layout, src: DistType, dst: DistType, cap: int | None = None,
           informed: bool = True, cost: CostModel | None = None, itemsize: int = 4, token_of=None) -> Problem:
        """The problem of planning from the reduced type ``src`` to ``dst`` on ``mesh``, priced by ``cost``
        (default: bytes) for elements of ``itemsize`` bytes, axes named for the cost model by ``token_of``."""
        pricing = Pricing(cost or CostModel.bytes(), mesh, itemsize, math.prod(src.shape), token_of)
        return cls(src.shape, (src.dims, src.partial), (dst.dims, dst.partial),
                   tuple(a for a in mesh.axis_names if mesh.size(a) > 1), {a: mesh.size(a) for a in mesh.axis_names},
                   layout, pricing, cap, informed)

    def group(self, axes: tuple[str, ...]) -> int:
        """Number of devices in a group over ``axes`` (memoised: it is asked for every new node)."""
        k = self._groups.get(axes)
        if k is None:
            k = self._groups[axes] = math.prod(self.sizes[a] for a in axes)
        return k

    def products_of(self, dims: tuple) -> tuple[int, ...]:
        """Per-dim group sizes of ``dims``."""
        return tuple(map(self.group, dims))
