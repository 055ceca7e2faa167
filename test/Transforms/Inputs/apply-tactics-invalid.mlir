// Each case below is run with tactics=arg1.1=y (see ../slicer-apply-tactics.mlir);
// every error is reported at the function and names the tactic.

"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 2>} : () -> ()
// expected-error@+1 {{Tile(arg=1, dim=1, axes='y'): unknown mesh axis 'y' (mesh @mesh has axes x)}}
func.func @unknown_axis(%a: tensor<8x8xf32>, %b: tensor<8x8xf32>) -> tensor<8x8xf32> {
  return %b : tensor<8x8xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 4>} : () -> ()
// expected-error@+1 {{Tile(arg=1, dim=1, axes='y'): dim 1 is out of range: argument #1 of @dim_out_of_range has type tensor<8xf32> (rank 1, dims 0..0)}}
func.func @dim_out_of_range(%a: tensor<8x8xf32>, %b: tensor<8xf32>) -> tensor<8xf32> {
  return %b : tensor<8xf32>
}


// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 4>} : () -> ()
// expected-error@+1 {{Tile(arg=1, dim=1, axes='y'): @arg_out_of_range has 1 argument (valid: arg=0..0)}}
func.func @arg_out_of_range(%a: tensor<8x8xf32>) -> tensor<8x8xf32> {
  return %a : tensor<8x8xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 4>} : () -> ()
// expected-error@+1 {{Tile(arg=1, dim=1, axes='y'): argument #1 of @not_a_tensor has type f32; tactics apply to ranked tensors only}}
func.func @not_a_tensor(%a: tensor<8x8xf32>, %b: f32) -> tensor<8x8xf32> {
  return %a : tensor<8x8xf32>
}

// -----

// The IR annotation is applied first; the schedule may not tile the same dim again.
"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 4>} : () -> ()
// expected-error@+1 {{Tile(arg=1, dim=1, axes='y'): dim 1 of argument #1 of @dim_tiled_twice is already tiled over x by an earlier tactic; to tile one dim over several axes give them in one tactic, major to minor (axes=('x', 'y'))}}
func.func @dim_tiled_twice(%a: tensor<8x8xf32>, %b: tensor<8x8xf32> {slicer.sharding = #slicer.sharding<@mesh, [[], ["x"]]>}) -> tensor<8x8xf32> {
  return %b : tensor<8x8xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 4>} : () -> ()
// expected-error@+1 {{Tile(arg=1, dim=1, axes='y'): mesh axis 'y' already tiles dim 0 of argument #1 of @axis_used_twice; a value can be tiled over each mesh axis once}}
func.func @axis_used_twice(%a: tensor<8x8xf32>, %b: tensor<8x8xf32> {slicer.sharding = #slicer.sharding<@mesh, [["y"], []]>}) -> tensor<8x8xf32> {
  return %b : tensor<8x8xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 4>} : () -> ()
// expected-error@+1 {{Tile(arg=1, dim=1, axes='y'): argument #1 of @tiled_and_replicated is replicated by an earlier tactic; a value is either tiled or replicated, drop one of the two}}
func.func @tiled_and_replicated(%a: tensor<8x8xf32>, %b: tensor<8x8xf32> {slicer.sharding = #slicer.sharding<@mesh, [[], []]>}) -> tensor<8x8xf32> {
  return %b : tensor<8x8xf32>
}
