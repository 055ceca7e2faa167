// Inputs of slicer-propagate{strict-conflicts=1} that must fail, with located errors.
"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 2>} : () -> ()
func.func @conflict(%a: tensor<8x8xf32>, %b: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %at = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    %s = "slicer.slice"(%a, %r) {dim = 0 : i64} : (tensor<8x8xf32>, !slicer.range<"x", 2>) -> tensor<4x8xf32>
    tosa.yield %s : tensor<4x8xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh, slicer.priority = 0 : i64, slicer.tactic = "Tile(arg=0, dim=0, axes='x')"} : () -> tensor<8x8xf32>
  %bt = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    %s = "slicer.slice"(%b, %r) {dim = 1 : i64} : (tensor<8x8xf32>, !slicer.range<"x", 2>) -> tensor<8x4xf32>
    tosa.yield %s : tensor<8x4xf32>
  }) {action = #slicer.tile<1>, mesh = @mesh, slicer.priority = 1 : i64, slicer.tactic = "Tile(arg=1, dim=1, axes='x')"} : () -> tensor<8x8xf32>
  // expected-error@+1 {{conflicting tactics at 'arith.addf': Tile(arg=1, dim=1, axes='x') tiles this value's dim 1 over x, but Tile(arg=0, dim=0, axes='x') needs dim 0 tiled over x}}
  %sum = arith.addf %at, %bt : tensor<8x8xf32>
  return %sum : tensor<8x8xf32>
}

// -----

"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 2>} : () -> ()
func.func @unsupported(%a: tensor<8x8xf32>) -> tensor<8x8xi32> {
  %at = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    %s = "slicer.slice"(%a, %r) {dim = 0 : i64} : (tensor<8x8xf32>, !slicer.range<"x", 2>) -> tensor<4x8xf32>
    tosa.yield %s : tensor<4x8xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8x8xf32>
  // expected-error@+1 {{cannot propagate the tiling of operand #0 dim 0 (over x, from an unnamed loop) through 'tensor.bitcast': no propagation rule for 'tensor.bitcast'}}
  %p = tensor.bitcast %at : tensor<8x8xf32> to tensor<8x8xi32>
  return %p : tensor<8x8xi32>
}
