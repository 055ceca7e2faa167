"""Typed, memory-bounded synthesis of collective redistribution plans (docs/redistribution.md).

Public API::

    from slicer.redistribution import Mesh, DistType, plan, Plan, simulate, RedistributionError

Types use the JAX / MLIR ``shard`` text form, axes major to minor: ``[[x,y],[]] partial=[z]``; parts of
axes (sub-axes) in Shardy's form, ``y:(1)2``. Plans minimise the estimated time (`CostModel`) or the bytes
received (``plan(..., cost="bytes")``). Each collective is one class of `steps` (its typing rule both ways,
cost, numpy semantics, text and IR forms), registered in `STEP_TYPES`. Executing plans over MPI is the
runtime's (`slicer.runtime.collectives.plan_executor`); this package is pure Python and numpy.
`Mesh` and `RedistributionError` are defined in `slicer.core` and re-exported here.
"""

from slicer.core.errors import RedistributionError
from slicer.core.mesh import Mesh

from .costs import CostModel
from .interpret import Trace, interpret
from .numpy_semantics import initial_blocks, simulate, simulate_blocks
from .plans import Plan
from .steps import (
                    STEP_TYPES,
                    AllGather,
                    AllReduce,
                    AllSlice,
                    AllToAll,
                    Collective,
                    Permute,
                    ReduceScatter,
                    Step,
                    step_from_fields,
                    type_before,
)
from .synthesis import plan
from .types import DistType, numpy_dtype, parse_shape, parse_type_text

__all__ = [
    "Mesh", "DistType", "Plan", "plan", "simulate", "simulate_blocks", "initial_blocks", "interpret", "Trace",
    "RedistributionError", "Step", "AllSlice", "AllGather", "AllToAll", "Permute", "AllReduce", "ReduceScatter",
    "STEP_TYPES", "Collective", "step_from_fields", "type_before", "numpy_dtype", "parse_shape", "parse_type_text",
    "CostModel",
]
