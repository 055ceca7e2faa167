"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 2>} : () -> ()
func.func @f(%a: tensor<8xf32>) -> tensor<8xf32> {
  // the range names an axis the mesh does not have
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"z", 2>):
    tosa.yield %a : tensor<8xf32>
  }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<8xf32>
  return %0 : tensor<8xf32>
}
