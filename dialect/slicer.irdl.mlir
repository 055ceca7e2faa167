// The `slicer` dialect: partitioning expressed inside the IR (docs/architecture.md).
//
// This file is the single definition of the dialect. Python loads it with
// `mlir.dialects.irdl.load_dialects` (slicer.dialect.load), and plain
// `mlir-opt --irdl-file=dialect/slicer.irdl.mlir` loads the very same file.
//
// IRDL checks the structure (operand/result/attribute kinds); what it cannot
// express (axes exist in the mesh, block shapes agree with range sizes, dims in
// bounds, loop bodies yield the right block types) is checked by the semantic
// verifier pass `slicer-verify` (dialect/verifier.py), which slicer-opt runs on
// every input.
//
// Terminator: IRDL 22.x cannot mark an operation as a terminator, so a region
// ending in a dynamic `slicer.yield` would fail verification ("block with no
// terminator"). `slicer.loop` bodies therefore end in the upstream `tosa.yield`,
// a registered terminator of tensors with no parent restriction. It is the
// loop's yield in every respect; Python builds it with `slicer.dialect.yield_`.
irdl.dialect @slicer {
  // A range over the devices of one mesh axis, or of several axes at once (a
  // product range, axes major to minor): `!slicer.range<"x", 2>`,
  // `!slicer.range<["x", "y"], 8>`. `size` is the number of indices.
  irdl.type @range {
    // A string or an array of strings; IRDL 22's any_of of two builtin bases
    // crashes its loader, so the verifier checks the form instead.
    %axes = irdl.any
    %size = irdl.base "#builtin.integer"
    irdl.parameters(axes: %axes, size: %size)
  }

  // Loop action: concatenate the body's blocks along dim `dim`.
  irdl.attribute @tile {
    %dim = irdl.base "#builtin.integer"
    irdl.parameters(dim: %dim)
  }

  // Loop action: add the body's blocks up.
  irdl.attribute @sum {
  }

  // A requested distribution (JAX / `shard` convention): for the mesh `mesh`,
  // one list of mesh axes per tensor dim, major to minor; `[]` = not tiled.
  // `#slicer.sharding<@mesh, [["x"], []]>`.
  irdl.attribute @sharding {
    %mesh = irdl.base "#builtin.symbol_ref"
    %dims = irdl.base "#builtin.array"
    irdl.parameters(mesh: %mesh, dims: %dims)
  }

  // `"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 4>}`
  // A device mesh: named axes (major to minor) and their sizes.
  irdl.operation @mesh {
    %name = irdl.base "#builtin.string"
    %axes = irdl.base "#builtin.array"
    %shape = irdl.base "#builtin.dense_array"
    irdl.attributes {"sym_name" = %name, "axes" = %axes, "shape" = %shape}
  }

  // A builder: runs its body once per index of the range block argument and
  // combines the yielded blocks with `action` (#slicer.tile<d> or #slicer.sum).
  // The body captures outer values implicitly and ends in `tosa.yield`.
  // All results have one type: IRDL 22 binds a constraint variable to one type,
  // also across the values of a variadic (any constraint, `irdl.base` included),
  // so results of different types are built as separate loops.
  irdl.operation @loop {
    %t = irdl.any
    irdl.results(results: variadic %t)
    %mesh = irdl.base "#builtin.symbol_ref"
    // #slicer.tile<d> or #slicer.sum (checked by slicer-verify: IRDL 22's
    // loader aborts on an any_of over base constraints).
    %action = irdl.any
    irdl.attributes {"mesh" = %mesh, "action" = %action}
    %body = irdl.region with size 1
    irdl.regions(body: %body)
  }

  // A slicer: the `r`-th of `size(r)` equal blocks of `source` along `dim`.
  irdl.operation @slice {
    %src = irdl.base "!builtin.tensor"
    %range = irdl.base @slicer::@range
    %res = irdl.base "!builtin.tensor"
    irdl.operands(source: %src, range: %range)
    irdl.results(result: %res)
    %dim = irdl.base "#builtin.integer"
    irdl.attributes {"dim" = %dim}
  }

  // The product of two ranges over disjoint axes (range algebra, docs/propagation.md):
  // index `i_major * size(minor) + i_minor`, axes major then minor. Slicing a dim by
  // `major` and the block by `minor` equals slicing the dim by the product.
  // `"slicer.range_product"(%rx, %ry) : (!slicer.range<"x", 2>, !slicer.range<"y", 4>) -> !slicer.range<["x", "y"], 8>`
  irdl.operation @range_product {
    %major = irdl.base @slicer::@range
    %minor = irdl.base @slicer::@range
    %res = irdl.base @slicer::@range
    irdl.operands(major: %major, minor: %minor)
    irdl.results(result: %res)
  }

  // A user annotation: `result` is `source`, requested with the given sharding.
  irdl.operation @annotate {
    %src = irdl.base "!builtin.tensor"
    %res = irdl.base "!builtin.tensor"
    irdl.operands(source: %src)
    irdl.results(result: %res)
    %sharding = irdl.base @slicer::@sharding
    irdl.attributes {"sharding" = %sharding}
  }

  // ---- SPMD collectives (appended for slicer-partition, issue 5) ----------
  // Only what the upstream `shard` dialect cannot express. MLIR 22's `shard`
  // has no general device permutation (`shard.shift` only shifts along one
  // grid axis), but the redistribution synthesizer merges block relabellings
  // into one arbitrary permutation. `slicer.permute`: for every pair
  // (src, dst) in `pairs` (flattened `array<i64: s0, d0, s1, d1, ...>`, linear
  // device ranks, row-major over the grid's axes), device dst receives the
  // whole local block of device src; devices not named as a dst keep theirs.
  // `"slicer.permute"(%t) {grid = @mesh, pairs = array<i64: 1, 2, 2, 1>}`
  irdl.operation @permute {
    %src = irdl.base "!builtin.tensor"
    %res = irdl.base "!builtin.tensor"
    irdl.operands(source: %src)
    irdl.results(result: %res)
    %grid = irdl.base "#builtin.symbol_ref"
    %pairs = irdl.base "#builtin.dense_array"
    irdl.attributes {"grid" = %grid, "pairs" = %pairs}
  }

  // `slicer.all_to_all` (issue 16): an all-to-all whose split dim gains the
  // group's axes in another order than the one the concat dim loses them in.
  // `shard.all_to_all` numbers the members of a group one way for both sides
  // (row-major over `grid_axes`): chunk j goes to member j and the pieces are
  // concatenated in member order. Here the pieces are concatenated in the
  // order of `grid_axes` (the concat dim's minor axes) while chunk j of
  // `split_axis` goes to the member whose index over `split_grid_axes` (the
  // same axes, reordered) is j. Same cost as the plain one; it saves the
  // permute that would otherwise reorder the axes.
  // `"slicer.all_to_all"(%t) {grid = @mesh, grid_axes = array<i16: 0, 1>,
  //   split_grid_axes = array<i16: 1, 0>, split_axis = 1 : index,
  //   concat_axis = 0 : index}`
  irdl.operation @all_to_all {
    %src = irdl.base "!builtin.tensor"
    %res = irdl.base "!builtin.tensor"
    irdl.operands(source: %src)
    irdl.results(result: %res)
    %grid = irdl.base "#builtin.symbol_ref"
    %axes = irdl.base "#builtin.dense_array"
    %split_axes = irdl.base "#builtin.dense_array"
    %split = irdl.base "#builtin.integer"
    %concat = irdl.base "#builtin.integer"
    irdl.attributes {"grid" = %grid, "grid_axes" = %axes, "split_grid_axes" = %split_axes,
                     "split_axis" = %split, "concat_axis" = %concat}
  }

  // Point-to-point transfers between devices of one mesh axis (MPMD pipeline
  // stages; any program whose devices run different code). `slicer.send`
  // hands its operand to the device whose coordinate along `mesh_axis` is `peer`
  // (its other coordinates the sender's); the `slicer.recv` of that device
  // with the same `tag` returns it. Lowered to MPI send / receive.
  // `"slicer.send"(%t) {mesh_axis = "p", peer = 1 : i64, tag = 0 : i64} : (tensor<4x8xf32>) -> ()`
  irdl.operation @send {
    %src = irdl.base "!builtin.tensor"
    irdl.operands(source: %src)
    irdl.results()
    %axis = irdl.base "#builtin.string"
    %peer = irdl.base "#builtin.integer"
    %tag = irdl.base "#builtin.integer"
    irdl.attributes {"mesh_axis" = %axis, "peer" = %peer, "tag" = %tag}
  }

  // `%t = "slicer.recv"() {mesh_axis = "p", peer = 0 : i64, tag = 0 : i64} : () -> tensor<4x8xf32>`
  irdl.operation @recv {
    %res = irdl.base "!builtin.tensor"
    irdl.operands()
    irdl.results(result: %res)
    %axis = irdl.base "#builtin.string"
    %peer = irdl.base "#builtin.integer"
    %tag = irdl.base "#builtin.integer"
    irdl.attributes {"mesh_axis" = %axis, "peer" = %peer, "tag" = %tag}
  }
}
