"""Typed, memory-bounded synthesis of collective redistribution plans.

Public API::

    from slicer.redistribution import Mesh, DistType, plan, Plan, simulate, RedistributionError

Types use the JAX / MLIR ``shard`` text form, axes major to minor: ``[[x,y],[]] partial=[z]``.
"""

from .collectives import STEP_TYPES, AllGather, AllReduce, AllSlice, AllToAll, Permute, ReduceScatter, Step
from .errors import RedistributionError
from .interpret import Trace, interpret
from .mesh import Mesh
from .plan import Plan
from .simulate import initial_blocks, simulate, simulate_blocks
from .synthesis import plan
from .types import DTYPES, DistType, numpy_dtype, parse_shape, parse_spec

__all__ = [
    "Mesh", "DistType", "Plan", "plan", "simulate", "simulate_blocks", "initial_blocks", "interpret", "Trace",
    "RedistributionError", "Step", "AllSlice", "AllGather", "AllToAll", "Permute", "AllReduce", "ReduceScatter",
    "STEP_TYPES", "DTYPES", "numpy_dtype", "parse_shape", "parse_spec",
]
