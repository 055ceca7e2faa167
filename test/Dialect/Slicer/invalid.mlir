// One case per semantic verifier error (dialect/verifier.py); what IRDL itself rejects (missing
// attributes, operand kinds) is not repeated here.
// RUN: slicer-opt %s -split-input-file -verify-diagnostics

// expected-error@+1 {{mesh @mesh has 2 axes but 1 sizes}}
"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2>} : () -> ()

// -----

// expected-error@+1 {{mesh @mesh declares axis 'x' twice}}
"slicer.mesh"() {sym_name = "mesh", axes = ["x", "x"], shape = array<i64: 2, 2>} : () -> ()

// -----

// expected-error@+1 {{mesh @mesh axis 'y' has size 0; sizes must be >= 1}}
"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 0>} : () -> ()

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 2>} : () -> ()
// expected-error@+1 {{redefinition of symbol named 'mesh'}}
"slicer.mesh"() {sym_name = "mesh", axes = ["y"], shape = array<i64: 2>} : () -> ()

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 2>} : () -> ()
func.func @unknown_mesh(%a: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{unknown mesh @other (declared meshes: @mesh)}}
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    %b = "slicer.slice"(%a, %r) {dim = 0 : i64} : (tensor<8xf32>, !slicer.range<"x", 2>) -> tensor<4xf32>
    tosa.yield %b : tensor<4xf32>
  }) {action = #slicer.tile<0>, mesh = @other} : () -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 2>} : () -> ()
func.func @bad_action(%a: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{'slicer.loop' action must be #slicer.tile<dim> or #slicer.sum, got 0 : i64}}
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    tosa.yield %a : tensor<8xf32>
  }) {action = 0, mesh = @mesh} : () -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 2>} : () -> ()
func.func @not_a_range(%a: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{'slicer.loop' block argument must be a well-formed !slicer.range<"axis", size>, got index}}
  %0 = "slicer.loop"() ({
  ^bb0(%r: index):
    tosa.yield %a : tensor<8xf32>
  }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 2>} : () -> ()
func.func @unknown_axis(%a: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{unknown mesh axis 'z' in !slicer.range<z> (mesh @mesh has axes x, y)}}
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"z", 2>):
    tosa.yield %a : tensor<8xf32>
  }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 4>} : () -> ()
func.func @range_size(%a: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{range over y has size 2, but mesh @mesh gives 4}}
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"y", 2>):
    tosa.yield %a : tensor<8xf32>
  }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 2>} : () -> ()
func.func @axis_in_range_twice(%a: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{mesh axis 'x' is used twice in !slicer.range<x, x>}}
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<["x", "x"], 4>):
    tosa.yield %a : tensor<8xf32>
  }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 2>} : () -> ()
func.func @axis_twice_nested(%a: tensor<8xf32>) -> tensor<8xf32> {
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    // expected-error@+1 {{mesh axis 'x' is already used by an enclosing loop}}
    %1 = "slicer.loop"() ({
    ^bb0(%q: !slicer.range<"x", 2>):
      tosa.yield %a : tensor<8xf32>
    }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<8xf32>
    tosa.yield %1 : tensor<8xf32>
  }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 2>} : () -> ()
func.func @yield_count(%a: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{'slicer.loop' has 1 results but its body yields 2 values}}
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    tosa.yield %a, %a : tensor<8xf32>, tensor<8xf32>
  }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 2>} : () -> ()
func.func @wrong_block_shape(%a: tensor<8x4xf32>) -> tensor<8x4xf32> {
  // expected-error@+1 {{'slicer.loop' (tile<0> over range<x, 2>) result #0 has type tensor<8x4xf32>, so the body must yield blocks of shape 4x4xf32, but it yields tensor<8x4xf32>}}
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    tosa.yield %a : tensor<8x4xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 2>} : () -> ()
func.func @sum_shape(%a: tensor<8x4xf32>) -> tensor<16x4xf32> {
  // expected-error@+1 {{'slicer.loop' (sum over range<x, 2>) result #0 has type tensor<16x4xf32>, so the body must yield blocks of shape 16x4xf32}}
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    tosa.yield %a : tensor<8x4xf32>
  }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<16x4xf32>
  return %0 : tensor<16x4xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 2>} : () -> ()
func.func @tile_dim_out_of_rank(%a: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{'slicer.loop' tiles dim 1 but result #0 has rank 1}}
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    tosa.yield %a : tensor<8xf32>
  }) {action = #slicer.tile<1>, mesh = @mesh} : () -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 2>} : () -> ()
func.func @slice_dim_missing(%a: tensor<8xf32>) -> tensor<8xf32> {
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    // expected-error@+1 {{'slicer.slice' dim 1 does not exist in tensor<8xf32> (rank 1)}}
    %b = "slicer.slice"(%a, %r) {dim = 1 : i64} : (tensor<8xf32>, !slicer.range<"x", 2>) -> tensor<4xf32>
    tosa.yield %b : tensor<4xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 4>} : () -> ()
func.func @slice_uneven_block(%a: tensor<6xf32>) -> tensor<6xf32> {
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 4>):
    // 6 over 4: padded blocks of ceil(6/4) = 2
    // expected-error@+1 {{gives blocks of shape 2, but the result type is tensor<1xf32>}}
    %b = "slicer.slice"(%a, %r) {dim = 0 : i64} : (tensor<6xf32>, !slicer.range<"x", 4>) -> tensor<1xf32>
    tosa.yield %a : tensor<6xf32>
  }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<6xf32>
  return %0 : tensor<6xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 2>} : () -> ()
func.func @slice_wrong_block(%a: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    // expected-error@+1 {{'slicer.slice' of tensor<8x4xf32> along dim 0 over range<x, 2> gives blocks of shape 4x4, but the result type is tensor<2x4xf32>}}
    %b = "slicer.slice"(%a, %r) {dim = 0 : i64} : (tensor<8x4xf32>, !slicer.range<"x", 2>) -> tensor<2x4xf32>
    tosa.yield %a : tensor<8x4xf32>
  }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 2>} : () -> ()
func.func @annotate_unknown_mesh(%a: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{unknown mesh @grid (declared meshes: @mesh)}}
  %0 = "slicer.annotate"(%a) {sharding = #slicer.sharding<@grid, [["x"]]>} : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 2>} : () -> ()
func.func @sharding_rank(%a: tensor<8x4xf32>) -> tensor<8x4xf32> {
  // expected-error@+1 {{'slicer.annotate': sharding [[x]] has 1 dims but tensor<8x4xf32> has rank 2; give one axis list per dim ([] for an untiled dim)}}
  %0 = "slicer.annotate"(%a) {sharding = #slicer.sharding<@mesh, [["x"]]>} : (tensor<8x4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 2>} : () -> ()
func.func @sharding_unknown_axis(%a: tensor<8x4xf32>) -> tensor<8x4xf32> {
  // expected-error@+1 {{'slicer.annotate': unknown mesh axis 'z' in sharding [[z],[]] (mesh @mesh has axes x, y)}}
  %0 = "slicer.annotate"(%a) {sharding = #slicer.sharding<@mesh, [["z"], []]>} : (tensor<8x4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 2>} : () -> ()
func.func @sharding_axis_twice(%a: tensor<8x4xf32>) -> tensor<8x4xf32> {
  // expected-error@+1 {{'slicer.annotate': mesh axis 'x' is used twice in sharding [[x],[x]]}}
  %0 = "slicer.annotate"(%a) {sharding = #slicer.sharding<@mesh, [["x"], ["x"]]>} : (tensor<8x4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 4>} : () -> ()
// expected-error@+1 {{argument #1: dim 1 of size 6 is not divisible by 8 (axes x, y)}}
func.func @argument_not_divisible(%a: tensor<8x4xf32>, %b: tensor<4x6xf32> {slicer.sharding = #slicer.sharding<@mesh, [[], ["x", "y"]]>}) -> tensor<8x4xf32> {
  return %a : tensor<8x4xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 2>} : () -> ()
// expected-error@+1 {{result #0: unknown mesh axis 'y' in sharding [[y]] (mesh @mesh has axes x)}}
func.func @result_unknown_axis(%a: tensor<8xf32>) -> (tensor<8xf32> {slicer.sharding = #slicer.sharding<@mesh, [["y"]]>}) {
  return %a : tensor<8xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 4>} : () -> ()
func.func @bad_product(%a: tensor<8xf32>) -> tensor<8xf32> {
  %0 = "slicer.loop"() ({
  ^bb0(%rx: !slicer.range<"x", 2>):
    %1 = "slicer.loop"() ({
    ^bb0(%ry: !slicer.range<"y", 4>):
      // expected-error@+1 {{'slicer.range_product' of range<x, 2> and range<y, 4> is range<x,y, 8>, not range<y,x, 8>}}
      %p = "slicer.range_product"(%rx, %ry) : (!slicer.range<"x", 2>, !slicer.range<"y", 4>) -> !slicer.range<["y", "x"], 8>
      tosa.yield %a : tensor<8xf32>
    }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<8xf32>
    tosa.yield %1 : tensor<8xf32>
  }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----
// expected-error@+1 {{'slicer.mesh' mesh 'axes' must be a list of strings}}
"slicer.mesh"() {sym_name = "mesh", axes = [1, 2], shape = array<i64: 2, 2>} : () -> ()

// -----

// expected-error@+1 {{'slicer.mesh' mesh 'shape' must be an array<i64: ...>}}
"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i32: 2>} : () -> ()

// -----

// expected-error@+1 {{mesh @mesh has no axes}}
"slicer.mesh"() {sym_name = "mesh", axes = [], shape = array<i64>} : () -> ()

// -----

// expected-error@+1 {{mesh @mesh has an empty axis name}}
"slicer.mesh"() {sym_name = "mesh", axes = ["x", ""], shape = array<i64: 2, 2>} : () -> ()

// -----

// expected-error@+1 {{mesh @mesh: invalid mesh axis name '1x'}}
"slicer.mesh"() {sym_name = "mesh", axes = ["1x"], shape = array<i64: 2>} : () -> ()

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 2>} : () -> ()
func.func @two_block_args(%a: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{'slicer.loop' body must be one block with one !slicer.range argument}}
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>, %s: !slicer.range<"x", 2>):
    %b = "slicer.slice"(%a, %r) {dim = 0 : i64} : (tensor<8xf32>, !slicer.range<"x", 2>) -> tensor<4xf32>
    tosa.yield %b : tensor<4xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 2>} : () -> ()
func.func @other_terminator(%a: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{'slicer.loop' body must end in 'tosa.yield' (the loop's yield)}}
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    %b = "slicer.slice"(%a, %r) {dim = 0 : i64} : (tensor<8xf32>, !slicer.range<"x", 2>) -> tensor<4xf32>
    vector.yield %b : tensor<4xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 2>} : () -> ()
func.func @index_result(%a: tensor<4xf32>) -> index {
  // expected-error@+1 {{'slicer.loop' result #0 and its yielded block must be ranked tensors}}
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    tosa.yield %a : tensor<4xf32>
  }) {action = #slicer.sum, mesh = @mesh} : () -> index
  return %0 : index
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 4>} : () -> ()
func.func @result_uneven_block(%a: tensor<1xf32>) -> tensor<6xf32> {
  // 6 over 4: padded blocks of ceil(6/4) = 2
  // expected-error@+1 {{the body must yield blocks of shape 2xf32, but it yields tensor<1xf32>}}
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 4>):
    tosa.yield %a : tensor<1xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<6xf32>
  return %0 : tensor<6xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 2>} : () -> ()
func.func @shared_axis(%a: tensor<8xf32>) -> tensor<8xf32> {
  %0 = "slicer.loop"() ({
  ^bb0(%rx: !slicer.range<"x", 2>):
    // expected-error@+1 {{'slicer.range_product' of range<x, 2> and range<x, 2>: the ranges share an axis}}
    %p = "slicer.range_product"(%rx, %rx) : (!slicer.range<"x", 2>, !slicer.range<"x", 2>) -> !slicer.range<["x", "x"], 4>
    tosa.yield %a : tensor<8xf32>
  }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 2>} : () -> ()
"slicer.mesh"() {sym_name = "grid", axes = ["x"], shape = array<i64: 2>} : () -> ()
func.func @which_mesh(%a: tensor<8xf32>, %r: !slicer.range<"x", 2>) -> tensor<4xf32> {
  // expected-error@+1 {{cannot tell which mesh this range belongs to: it is not a slicer.loop argument and the module declares 2 meshes}}
  %b = "slicer.slice"(%a, %r) {dim = 0 : i64} : (tensor<8xf32>, !slicer.range<"x", 2>) -> tensor<4xf32>
  return %b : tensor<4xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 2>} : () -> ()
func.func @annotate_type(%a: tensor<8xf32>) -> tensor<8xf64> {
  // expected-error@+1 {{'slicer.annotate' result type tensor<8xf64> differs from its source type tensor<8xf32>}}
  %b = "slicer.annotate"(%a) {sharding = #slicer.sharding<@mesh, [["x"]]>} : (tensor<8xf32>) -> tensor<8xf64>
  return %b : tensor<8xf64>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 2>} : () -> ()
// expected-error@+1 {{argument #0: expected #slicer.sharding<@mesh, [[axes], ...]>, got 3 : i64}}
func.func @not_a_sharding(%a: tensor<8xf32> {slicer.sharding = 3}) -> tensor<8xf32> {
  return %a : tensor<8xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 2>} : () -> ()
// expected-error@+1 {{argument #0: a sharding needs a ranked tensor, got index}}
func.func @sharded_index(%i: index {slicer.sharding = #slicer.sharding<@mesh, [["x"]]>}) -> index {
  return %i : index
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 2>} : () -> ()
func.func @malformed_range(%a: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{'slicer.loop' block argument must be a well-formed !slicer.range<"axis", size>, got !slicer.range<3 : i64, 2 : i64>}}
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<3, 2>):
    // expected-error@+1 {{'slicer.slice' range !slicer.range<3 : i64, 2 : i64> is malformed}}
    %b = "slicer.slice"(%a, %r) {dim = 0 : i64} : (tensor<8xf32>, !slicer.range<3, 2>) -> tensor<4xf32>
    tosa.yield %b : tensor<4xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 2>} : () -> ()
func.func @malformed_product(%a: tensor<8xf32>, %r: !slicer.range<3, 2>) -> tensor<8xf32> {
  // expected-error@+1 {{'slicer.range_product' takes and returns well-formed !slicer.range values}}
  %p = "slicer.range_product"(%r, %r) : (!slicer.range<3, 2>, !slicer.range<3, 2>) -> !slicer.range<["x"], 4>
  return %a : tensor<8xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 2>} : () -> ()
// expected-error@+1 {{argument #0: expected #slicer.sharding<@mesh, [[axes], ...]>, got #slicer.sharding<@mesh, [3]>}}
func.func @sharding_dim_not_a_list(%a: tensor<8xf32> {slicer.sharding = #slicer.sharding<@mesh, [3]>}) -> tensor<8xf32> {
  return %a : tensor<8xf32>
}
