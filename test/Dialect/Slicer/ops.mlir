// Round-trip of every slicer construct: through slicer-opt, twice, and through
// the real mlir-opt with the same IRDL file.
// RUN: slicer-opt %s | FileCheck %s
// RUN: slicer-opt %s | slicer-opt | FileCheck %s
// RUN: slicer-opt %s | mlir-opt --irdl-file=%irdl | FileCheck %s
// RUN: slicer-opt %s --mlir-print-op-generic | mlir-opt --irdl-file=%irdl | FileCheck %s

// CHECK: "slicer.mesh"() {axes = ["x", "y"], shape = array<i64: 2, 4>, sym_name = "mesh"}
"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 4>} : () -> ()

// CHECK-LABEL: func.func @tile_loop
// CHECK-SAME: slicer.sharding = #slicer.sharding<@mesh, {{\[\["x"\], \[\]\]}}>
// CHECK: "slicer.loop"() ({
// CHECK-NEXT: ^bb0(%[[R:.*]]: !slicer.range<"x", 2 : i64>):
// CHECK-NEXT: "slicer.slice"(%{{.*}}, %[[R]]) {dim = 0 : i64} : (tensor<8x4xf32>, !slicer.range<"x", 2 : i64>) -> tensor<4x4xf32>
// CHECK-NEXT: tosa.yield %{{.*}} : tensor<4x4xf32>
// CHECK-NEXT: }) {action = #slicer.tile<0 : i64>, mesh = @mesh} : () -> tensor<8x4xf32>
func.func @tile_loop(%a: tensor<8x4xf32> {slicer.sharding = #slicer.sharding<@mesh, [["x"], []]>}) -> tensor<8x4xf32> {
  %0 = "slicer.loop"() ({
  ^bb0(%r: !slicer.range<"x", 2>):
    %b = "slicer.slice"(%a, %r) {dim = 0 : i64} : (tensor<8x4xf32>, !slicer.range<"x", 2>) -> tensor<4x4xf32>
    tosa.yield %b : tensor<4x4xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// CHECK-LABEL: func.func @nested_sum_and_product_range
// CHECK: ^bb0(%{{.*}}: !slicer.range<"x", 2 : i64>):
// CHECK: ^bb0(%{{.*}}: !slicer.range<"y", 4 : i64>):
// CHECK: }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<4x4xf32>
// CHECK: }) {action = #slicer.tile<1 : i64>, mesh = @mesh} : () -> (tensor<4x8xf32>, tensor<4x8xf32>)
// CHECK: ^bb0(%{{.*}}: !slicer.range<["x", "y"], 8 : i64>):
// CHECK: "slicer.annotate"(%{{.*}}) {sharding = #slicer.sharding<@mesh, {{\[\[\], \["x", "y"\]\]}}>} : (tensor<4x8xf32>) -> tensor<4x8xf32>
func.func @nested_sum_and_product_range(%a: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %0:2 = "slicer.loop"() ({
  ^bb0(%rx: !slicer.range<"x", 2>):
    %ax = "slicer.slice"(%a, %rx) {dim = 1 : i64} : (tensor<4x8xf32>, !slicer.range<"x", 2>) -> tensor<4x4xf32>
    %s = "slicer.loop"() ({
    ^bb0(%ry: !slicer.range<"y", 4>):
      tosa.yield %ax : tensor<4x4xf32>
    }) {action = #slicer.sum, mesh = @mesh} : () -> tensor<4x4xf32>
    tosa.yield %ax, %s : tensor<4x4xf32>, tensor<4x4xf32>
  }) {action = #slicer.tile<1>, mesh = @mesh} : () -> (tensor<4x8xf32>, tensor<4x8xf32>)
  %1 = "slicer.loop"() ({
  ^bb0(%rxy: !slicer.range<["x", "y"], 8>):
    %b = "slicer.slice"(%a, %rxy) {dim = 1 : i64} : (tensor<4x8xf32>, !slicer.range<["x", "y"], 8>) -> tensor<4x1xf32>
    tosa.yield %b : tensor<4x1xf32>
  }) {action = #slicer.tile<1>, mesh = @mesh} : () -> tensor<4x8xf32>
  %2 = "slicer.annotate"(%1) {sharding = #slicer.sharding<@mesh, [[], ["x", "y"]]>} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0#0, %2 : tensor<4x8xf32>, tensor<4x8xf32>
}

// CHECK-LABEL: func.func @product
// CHECK: "slicer.range_product"(%{{.*}}, %{{.*}}) : (!slicer.range<"x", 2 : i64>, !slicer.range<"y", 4 : i64>) -> !slicer.range<["x", "y"], 8 : i64>
func.func @product(%a: tensor<16xf32>) -> tensor<16xf32> {
  %0 = "slicer.loop"() ({
  ^bb0(%rx: !slicer.range<"x", 2>):
    %1 = "slicer.loop"() ({
    ^bb0(%ry: !slicer.range<"y", 4>):
      %p = "slicer.range_product"(%rx, %ry) : (!slicer.range<"x", 2>, !slicer.range<"y", 4>) -> !slicer.range<["x", "y"], 8>
      %s = "slicer.slice"(%a, %p) {dim = 0 : i64} : (tensor<16xf32>, !slicer.range<["x", "y"], 8>) -> tensor<2xf32>
      tosa.yield %s : tensor<2xf32>
    }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<8xf32>
    tosa.yield %1 : tensor<8xf32>
  }) {action = #slicer.tile<0>, mesh = @mesh} : () -> tensor<16xf32>
  return %0 : tensor<16xf32>
}

// The reordering all-to-all of the SPMD programs (split dim gains the axes in another order).
// CHECK-LABEL: func.func @reordering_all_to_all
// CHECK: "slicer.all_to_all"(%{{.*}}) {concat_axis = 0 : index, grid = @mesh, grid_axes = array<i16: 0, 1>, split_axis = 1 : index, split_grid_axes = array<i16: 1, 0>} : (tensor<8x8xf32>) -> tensor<64x1xf32>
func.func @reordering_all_to_all(%a: tensor<8x8xf32>) -> tensor<64x1xf32> {
  %0 = "slicer.all_to_all"(%a) {grid = @mesh, grid_axes = array<i16: 0, 1>, split_grid_axes = array<i16: 1, 0>, split_axis = 1 : index, concat_axis = 0 : index} : (tensor<8x8xf32>) -> tensor<64x1xf32>
  return %0 : tensor<64x1xf32>
}

// Point-to-point transfers (pipeline stages).
// CHECK-LABEL: func.func @transfers
// CHECK: "slicer.send"(%{{.*}}) {mesh_axis = "p", peer = 1 : i64, tag = 0 : i64} : (tensor<4x8xf32>) -> ()
// CHECK: "slicer.recv"() {mesh_axis = "p", peer = 1 : i64, tag = 1 : i64} : () -> tensor<4x8xf32>
func.func @transfers(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  "slicer.send"(%a) {mesh_axis = "p", peer = 1 : i64, tag = 0 : i64} : (tensor<4x8xf32>) -> ()
  %r = "slicer.recv"() {mesh_axis = "p", peer = 1 : i64, tag = 1 : i64} : () -> tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}
