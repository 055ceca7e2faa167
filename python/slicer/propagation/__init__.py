"""Propagation of partitioning loops through a program (docs/propagation.md; layer 6 of docs/architecture.md).

The rule table (`slicer.rules`) says how an op computes block-wise when one of
its dims is tiled; `laws` are the rewrites of the loop/slice calculus
(dead code, merging and composing slices, deforestation, commuting slices into
loops, backward into producers, forward into consumers, hoisting, fusion of
sibling loops; `laws.LAWS` lists them in order, grouped by concern in `merging`, `slices`, `blockwise` and
`fusion` over the shared `loops` and `journal`); `engine` applies them to a fixpoint and reports conflicts;
`explain` says which loops partition each op and why.
"""

from slicer.core.errors import PropagationError

from .engine import Conflict, propagate, propagate_module
from .explain import explain

__all__ = ["Conflict", "PropagationError", "explain", "propagate", "propagate_module"]
