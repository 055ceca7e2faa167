"""The `slicer` dialect: mesh, ranges, `loop`, `slice`, annotations (docs/architecture.md, layer 2).

Defined in IRDL (`slicer.irdl.mlir`) and registered dynamically in a context by
`load_dialect`. This package adds typed views, builders, parsing with file
locations, and the semantic verifier for what IRDL cannot express. The IR
names themselves live in `slicer.core.names`.
"""

from slicer.core.operations import walk_ops  # the one IR walker, offered beside the dialect's views

from .attributes import Action, RangeType, Sharding, SumAction, TileAction, action_of
from .collectives import PermuteOp, permute
from .loader import IRDL_PATH, load_dialect, make_context
from .ops import (
    AnnotateOp,
    LoopOp,
    MeshOp,
    SliceOp,
    annotate,
    block_type,
    find_meshes,
    grids,
    loop,
    mesh,
    range_product,
    slice_,
    split_product_slices,
    with_dim,
    yield_,
)
from .parsing import parse_source

__all__ = [
    "Action", "RangeType", "Sharding", "SumAction", "TileAction", "action_of",
    "PermuteOp", "permute",
    "IRDL_PATH", "load_dialect", "make_context", "parse_source",
    "AnnotateOp", "LoopOp", "MeshOp", "SliceOp",
    "annotate", "block_type", "find_meshes", "grids", "loop", "mesh", "range_product", "slice_", "split_product_slices",
    "walk_ops", "with_dim", "yield_",
]
