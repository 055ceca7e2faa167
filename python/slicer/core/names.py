"""The one home of every IR name Slicer reads or writes (ops, attributes), so renaming one is one edit.

`test/unit/core/test_names.py` fails if a string literal of a `slicer.` attribute or op name appears
anywhere else in the package.
"""

# -- ops of the slicer dialect (dialect/slicer.irdl.mlir) ---------------------------------------------------
DIALECT_PREFIX = "slicer."
MESH = "slicer.mesh"
LOOP = "slicer.loop"
SLICE = "slicer.slice"
ANNOTATE = "slicer.annotate"
RANGE_PRODUCT = "slicer.range_product"
PERMUTE = "slicer.permute"
REORDERING_ALL_TO_ALL = "slicer.all_to_all"
"""An all-to-all whose split dim gains the group's axes in another order (`shard.all_to_all` cannot)."""
# IRDL 22 cannot declare terminators; loop bodies end in the upstream `tosa.yield` (see slicer.irdl.mlir).
YIELD = "tosa.yield"

# -- attributes on the input program and the loop program ---------------------------------------------------
SHARDING_ATTR = "slicer.sharding"
"""A requested distribution (`#slicer.sharding<@mesh, [[x], []]>`) on function arguments/results."""
ARG_NAME_ATTR = "slicer.name"
"""A function argument's name (e.g. a model parameter's), so tactics can name it instead of its position."""
TACTIC_ATTR = "slicer.tactic"
"""On loops: the tactic that started them."""
PRIORITY_ATTR = "slicer.priority"
"""On loops: the tactic's place in the schedule (earlier tactics win conflicts)."""
RULE_ATTR = "slicer.rule"
"""On loops: the propagation rule that made the loop."""
CONFLICT_ATTR = "slicer.conflict"
"""Left by slicer-propagate on an op whose operand's tactics conflict; quoted in the collective's provenance."""

# -- attributes on the SPMD program ----------------------------------------------------------------------------
DIST_ATTR = "slicer.dist"
"""Distributed types: a string on func args/results, an array of strings (one per result) on ops."""
DIST_SOURCE_ATTR = "slicer.dist_source"
"""On SPMD function results: "requested" (a `slicer.sharding` asked for it) or "default" (propagated type)."""
SPMD_MESH_ATTR = "slicer.spmd_mesh"
"""On an SPMD `func.func`: the mesh it was partitioned over, as text (`x=2,y=4`, axes major to minor)."""
AXES_ATTR = "slicer.axes"
"""On the `shard.grid` that replaces a `slicer.mesh`: the axis names (shard grids have no names). On a grid that
refines it (collectives over sub-axes): the sub-axes, e.g. `["x", "y:(1)2", "y:(2)2"]`."""
REFINES_ATTR = "slicer.refines"
"""On a `shard.grid` whose axes are parts of another grid's axes (same devices, same linear ranks): that grid."""

# -- upstream ops the SPMD program uses -----------------------------------------------------------------------
GRID = "shard.grid"
MULTI_INDEX = "shard.process_multi_index"
ALL_GATHER = "shard.all_gather"
ALL_TO_ALL = "shard.all_to_all"
ALL_REDUCE = "shard.all_reduce"
REDUCE_SCATTER = "shard.reduce_scatter"
ALL_SLICE = "shard.all_slice"
COLLECTIVE_OPS = (ALL_GATHER, ALL_TO_ALL, ALL_REDUCE, REDUCE_SCATTER, ALL_SLICE, PERMUTE, REORDERING_ALL_TO_ALL)
"""Every op that communicates between devices in an SPMD program."""
# attribute keys of the collective ops (`shard`'s and the slicer ones), read and written by the step classes
# (`slicer.redistribution.steps`)
GRID_ATTR = "grid"
"""On `shard` collectives: the grid they communicate over."""
GRID_AXES_ATTR = "grid_axes"
"""On `shard` collectives: the grid axes of the group."""
SPLIT_GRID_AXES_ATTR = "split_grid_axes"
GATHER_AXIS_ATTR = "gather_axis"
SPLIT_AXIS_ATTR = "split_axis"
CONCAT_AXIS_ATTR = "concat_axis"
SCATTER_AXIS_ATTR = "scatter_axis"
SLICE_AXIS_ATTR = "slice_axis"
PAIRS_ATTR = "pairs"
"""On `slicer.permute`: its (source, destination) linear ranks, flattened."""
