"""The `slicer` dialect: mesh, ranges, `loop`, `slice`, annotations (DESIGN.md section 1).

Defined in IRDL (`slicer.irdl.mlir`) and registered dynamically in a context by
`load_dialect`. This package adds typed views, builders and the semantic
verifier for what IRDL cannot express.
"""

from .attributes import Action, RangeType, Sharding, SumAction, TileAction, action_of
from .loader import IRDL_PATH, load_dialect, make_context
from .ops import (
    ANNOTATE,
    LOOP,
    MESH,
    RANGE_PRODUCT,
    PRIORITY_ATTR,
    RULE_ATTR,
    SHARDING_ATTR,
    TACTIC_ATTR,
    SLICE,
    YIELD,
    AnnotateOp,
    LoopOp,
    MeshInfo,
    MeshOp,
    SliceOp,
    annotate,
    block_type,
    find_meshes,
    loop,
    mesh,
    range_product,
    slice_,
    split_product_slices,
    walk_ops,
    with_dim,
    yield_,
)

__all__ = [
    "Action", "RangeType", "Sharding", "SumAction", "TileAction", "action_of",
    "IRDL_PATH", "load_dialect", "make_context",
    "ANNOTATE", "LOOP", "MESH", "RANGE_PRODUCT", "PRIORITY_ATTR", "RULE_ATTR", "SHARDING_ATTR", "SLICE", "TACTIC_ATTR", "YIELD",
    "AnnotateOp", "LoopOp", "MeshInfo", "MeshOp", "SliceOp",
    "annotate", "block_type", "find_meshes", "loop", "mesh", "range_product", "slice_", "split_product_slices", "walk_ops", "with_dim", "yield_",
]
