"""The one home of every IR name Slicer reads or writes (ops, attributes), so renaming one is one edit.

`test/unit/core/test_names.py` fails if a string literal of a `slicer.` attribute or op name appears
anywhere else in the package.
"""

# -- ops of the slicer dialect (dialect/slicer.irdl.mlir) ---------------------------------------------------
DIALECT_PREFIX = "slicer."
LINALG_PREFIX = "linalg."
"""Every linalg op's name starts with it (named ops and `linalg.generic` alike)."""
MESH = "slicer.mesh"
LOOP = "slicer.loop"
SLICE = "slicer.slice"
ANNOTATE = "slicer.annotate"
RANGE_PRODUCT = "slicer.range_product"
PERMUTE = "slicer.permute"
REORDERING_ALL_TO_ALL = "slicer.all_to_all"
"""An all-to-all whose split dim gains the group's axes in another order (`shard.all_to_all` cannot)."""
SEND = "slicer.send"
"""A point-to-point transfer's sending half: the operand goes to the device at coordinate `peer` of mesh axis
`mesh_axis` (the sender's other coordinates), matched by the `slicer.recv` of the same `tag` (pipeline stages)."""
RECV = "slicer.recv"
"""A point-to-point transfer's receiving half: its result comes from the device at coordinate `peer` of `axis`."""
P2P_AXIS_ATTR = "mesh_axis"
"""On `slicer.send` / `slicer.recv`: the mesh axis the transfer crosses."""
P2P_PEER_ATTR = "peer"
"""On `slicer.send` / `slicer.recv`: the other device's coordinate along the axis."""
P2P_TAG_ATTR = "tag"
"""On `slicer.send` / `slicer.recv`: the number that pairs a send with its receive (unique in a program)."""
PIPELINE_STAGE_ATTR = "slicer.stage"
"""On a pipelined step's stage function: the pipeline stage (coordinate of the pipeline axis) that runs it."""
# IRDL 22 cannot declare terminators; loop bodies end in the upstream `tosa.yield` (see slicer.irdl.mlir).
YIELD = "tosa.yield"

# -- attributes of the slicer ops (`slicer.mesh`: SYM_NAME_ATTR, MESH_AXES_ATTR, SHAPE_ATTR; `slicer.slice`: DIM_ATTR;
#    `slicer.annotate`: SHARDING_OPERAND_ATTR)
MESH_AXES_ATTR = "axes"
"""On `slicer.mesh`: the axis names, major to minor."""
LOOP_MESH_ATTR = "mesh"
"""On `slicer.loop`: the mesh it partitions over."""
LOOP_ACTION_ATTR = "action"
"""On `slicer.loop`: what the loop does with its results (tile or sum)."""

# -- attributes on the input program and the loop program ---------------------------------------------------
SHARDING_ATTR = "slicer.sharding"
"""A requested distribution (`#slicer.sharding<@mesh, [[x], []]>`) on function arguments/results."""
ARG_NAME_ATTR = "slicer.name"
"""A function argument's name (e.g. a model parameter's), so tactics can name it instead of its position."""
TACTIC_ATTR = "slicer.tactic"
# On the entry function after `slicer-auto`: the chosen tactics in their text form (slicer.parse_tactics reads it).
AUTO_TACTICS_ATTR = "slicer.auto_tactics"
"""On loops: the tactic that started them."""
PRIORITY_ATTR = "slicer.priority"
"""On loops: the tactic's place in the schedule (earlier tactics win conflicts)."""
RULE_ATTR = "slicer.rule"
"""On loops: the propagation rule that made the loop."""
CONFLICT_ATTR = "slicer.conflict"
"""Left by slicer-propagate on an op whose operand's tactics conflict; quoted in the collective's provenance."""
BLOCKED_ATTR = "slicer.blocked"
"""Left by slicer-propagate on an op a tactic's tiling could not enter (why: no rule, a dim not divisible); the
partitioner quotes it when that op then gathers the tactic's value (a degraded strategy) and drops it."""

MODULE_LOC_PREFIX = "module:"
"""An imported op's location is `NameLoc("module:<path>", <file:line>)` when a module of the model computed it
(`blocks.0.attn`, the dotted path of `named_modules`); `slicer-remat` recomputes modules by these paths."""
CONTEXT_TO_HEADS_LOC = "context parallel: to heads"
CONTEXT_TO_SEQUENCE_LOC = "context parallel: back to the sequence"
"""The names wrapped around the locations of the annotations context parallelism by heads inserts
(`frontends/context_heads.py`): the all_to_alls they make carry them, and `explain()` says which way each moves."""
REMAT_ATTR = "slicer.remat"
"""On ops `slicer-remat` cloned into the backward pass: the module they recompute (tells them from the forward
ops, and keeps a later CSE from merging them back)."""
REMAT_UNITS_ATTR = "slicer.remat_units"
"""On a function `slicer-remat` rewrote: one string per unit, `"<unit> <policy> <saved bytes> <recomputed bytes>
<cloned ops>"` (bytes per device of the values its backward reads), which `Program.memory()` reports."""

# -- attributes on the SPMD program ----------------------------------------------------------------------------
DIST_ATTR = "slicer.dist"
"""Distributed types: a string on func args/results, an array of strings (one per result) on ops."""
LOGICAL_SHAPE_ATTR = "slicer.logical_shape"
"""On SPMD function arguments and results whose dims do not divide their tiles: the value's true (logical)
global shape; `slicer.dist`'s global shape is the padded one (docs/partition.md, "Uneven shapes")."""
DIST_SOURCE_ATTR = "slicer.dist_source"
"""On SPMD function results: "requested" (a `slicer.sharding` asked for it), "default" (propagated type) or
"tactic <label>" (a result tactic tiled it)."""
DEGRADED_ATTR = "slicer.degraded"
"""On an SPMD `func.func`: one string per place where a tactic's split was lost (its value gathered for an op
computed replicated over the tactic's axes), said by `slicer.compile` as a `DegradedStrategy` warning."""
CHUNK_ATTR = "slicer.chunk"
"""On a collective of one chunk of a contraction split by slicer-collective-matmul (unit): its place in the
pipeline is the point, so slicer-bucket-collectives never combines it with others."""
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

# -- upstream dialects --------------------------------------------------------------------------------------------
BUILT_DIALECTS = ("func", "arith", "linalg", "tensor", "math", "memref", "scf", "cf", "affine", "bufferization",
                  "vector", "x86vector", "llvm", "shard", "tosa")
"""The dialects Slicer builds ops of (through the bindings' builders or `ir.Operation.create`; `tosa` for
`YIELD`), loaded into every context it makes (`dialect.make_context`). Others load when first used: a user's
`index` or `complex` when parsed, `transform` when the kernel vectorizer parses its script, a pass's dependent
dialects when it runs. Loading all ~60 registered dialects, as a default `ir.Context()` does, costs more than
twice as much per context (thousands per test run)."""

# -- upstream attributes Slicer reads or writes (op names come from the bindings: `linalg.GenericOp.OPERATION_NAME`)
SYM_NAME_ATTR = "sym_name"
SYM_VISIBILITY_ATTR = "sym_visibility"
FUNCTION_TYPE_ATTR = "function_type"
ARG_ATTRS_ATTR = "arg_attrs"
RES_ATTRS_ATTR = "res_attrs"
INDEXING_MAPS_ATTR = "indexing_maps"
ITERATOR_TYPES_ATTR = "iterator_types"
OPERAND_SEGMENT_SIZES_ATTR = "operandSegmentSizes"
STATIC_SIZES_ATTR = "static_sizes"
STATIC_OUTPUT_SHAPE_ATTR = "static_output_shape"
REASSOCIATION_ATTR = "reassociation"
VALUE_ATTR = "value"
"""`arith.constant`'s value."""
DIM_ATTR = "dim"
"""`linalg.index`'s dim (and the `slicer.slice` dim)."""
GRID_ATTR = "grid"
"""On `shard` collectives: the grid they communicate over."""
GRID_AXES_ATTR = "grid_axes"
"""On `shard` collectives: the grid axes of the group."""
SHAPE_ATTR = "shape"
"""On `shard.grid`: its axis sizes."""
SHARDING_OPERAND_ATTR = "sharding"
"""On `slicer.annotate`: the requested distribution."""
EMIT_C_INTERFACE_ATTR = "llvm.emit_c_interface"
"""On a `func.func`: the LLVM lowering also emits `_mlir_ciface_<name>`, taking memref descriptors by pointer."""
WRITABLE_ATTR = "bufferization.writable"
"""On a function argument: whether bufferization may write into its buffer (kernels' inputs are read-only)."""

# -- attributes the kernel code generators set on the modules they build ------------------------------------------
VECTORIZE_TAG_ATTR = "slicer.vectorize_tag"
"""On linalg ops the vectorizer marks for its transform script (lowering/vectorize.py)."""
ASSERT_MESSAGES_ATTR = "slicer.assert_messages"
"""Module attribute: the messages of the program's run-time checks, the first being number 1 (lowering/asserts.py)."""
TARGET_AVX512_ATTR = "slicer.target_avx512"
"""Module attribute set by `aot.compile_library` from its Target: whether the kernels may use AVX-512."""
TARGET_BF16_UNITS_ATTR = "slicer.target_bf16_units"
"""Module attribute set by `aot.compile_library` from its Target: the units bf16 contractions may use (`amx`,
`avx512bf16` or `f32`, lowering/contract/matrix_units.py)."""
USES_AMX_ATTR = "slicer.uses_amx"
"""Module attribute the contraction generator sets when it emitted AMX tile code: the process that loads the
kernels must ask Linux for the tile state first (lowering/amx_permission.py)."""
TARGET_AVX512_BF16_ATTR = "slicer.target_avx512_bf16"
"""Module attribute set by `aot.compile_library` from its Target: whether it has AVX512-BF16 (`vcvtneps2bf16`),
so roundings to bf16 are left to LLVM (`slicer-kernel-expand-bf16`); absent, they are expanded (any CPU)."""
STATIC_OFFSETS_ATTR = "static_offsets"
STATIC_STRIDES_ATTR = "static_strides"
STATIC_LOW_ATTR = "static_low"
STATIC_HIGH_ATTR = "static_high"
INDEX_AXES_ATTR = "axes"
"""On `shard.process_multi_index`: the grid axes whose indices it returns."""
GATHER_AXIS_ATTR = "gather_axis"
"""On `shard.all_gather`: the tensor dim gathered (upstream calls a tensor dim an axis here)."""
SPLIT_AXIS_ATTR = "split_axis"
"""On `shard.all_to_all`: the tensor dim split."""
CONCAT_AXIS_ATTR = "concat_axis"
"""On `shard.all_to_all`: the tensor dim concatenated."""
SCATTER_AXIS_ATTR = "scatter_axis"
"""On `shard.reduce_scatter`: the tensor dim scattered."""
SLICE_AXIS_ATTR = "slice_axis"
"""On `shard.all_slice`: the tensor dim sliced."""
FASTMATH_ATTR = "fastmath"
"""On arith float ops: their fast-math flags (`#arith.fastmath<...>`)."""
REDUCTION_ATTR = "reduction"
"""On `shard.all_reduce` / `shard.reduce_scatter`: the reduction kind."""
SPLIT_GRID_AXES_ATTR = "split_grid_axes"
"""On `slicer.all_to_all` (the reordering all-to-all): the order in which the split dim gains the group's axes."""
PAIRS_ATTR = "pairs"
"""On `slicer.permute`: its (source, destination) linear ranks, flattened."""
