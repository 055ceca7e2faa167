// slicer-auto: the tactics searched on the mesh within the budget, applied as slicer-apply-tactics would, and
// recorded on the entry function in their text form.
// A large batch and small weights: data parallel (the batch's dim 0 over x).
// RUN: slicer-opt %s -p 'slicer-auto{mesh=x=2}' | FileCheck %s --check-prefix=DATA
// A budget of 400 kB per device forbids replicated weights (512 KiB): Megatron over y.
// RUN: sed -e 's/1024x/8x/g' %s | slicer-opt -p 'slicer-auto{mesh=y=2 memory-budget=400kB}' | FileCheck %s --check-prefix=MEGATRON
// The user's tactics come first; the rest is completed.
// RUN: sed -e 's/1024x/8x/g' %s | slicer-opt -p 'slicer-auto{mesh=y=2 memory-budget=400kB tactics=arg1.1=y}' | FileCheck %s --check-prefix=USER
// A budget nothing fits names the smallest peak found:
// RUN: not slicer-opt %s -p 'slicer-auto{mesh=x=2 memory-budget=100}' 2>&1 | FileCheck %s --check-prefix=TIGHT
// Bad options:
// RUN: not slicer-opt %s -p 'slicer-auto{mesh=x=2 memory-budget=lots}' 2>&1 | FileCheck %s --check-prefix=BUDGET
// RUN: not slicer-opt %s -p 'slicer-auto' 2>&1 | FileCheck %s --check-prefix=NOMESH

// DATA: func.func @mlp{{.*}}slicer.auto_tactics = "arg0.0=x"
// DATA: slicer.tactic = "Tile(arg=0, dim=0, axes='x')"
// MEGATRON: slicer.auto_tactics = "arg1.1=y;arg2.0=y;arg3.0=y"
// MEGATRON-DAG: slicer.tactic = "Tile(arg=1, dim=1, axes='y')"
// MEGATRON-DAG: slicer.tactic = "Tile(arg=3, dim=0, axes='y')"
// USER: slicer.auto_tactics = "arg1.1=y;arg2.0=y;arg3.0=y"
// TIGHT: error: no partitioning found fits the memory budget of 100 B per device on mesh x=2: the smallest peak found is
// BUDGET: error: pass 'slicer-auto': memory budget 'lots' does not parse
// NOMESH: error: pass 'slicer-auto' needs option 'mesh'

func.func @mlp(%x: tensor<1024x128xf32>, %w1: tensor<128x512xf32>, %b1: tensor<512xf32>,
               %w2: tensor<512x128xf32>) -> tensor<1024x128xf32> {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<1024x512xf32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<1024x512xf32>) -> tensor<1024x512xf32>
  %h = linalg.matmul ins(%x, %w1 : tensor<1024x128xf32>, tensor<128x512xf32>)
                     outs(%f1 : tensor<1024x512xf32>) -> tensor<1024x512xf32>
  %a = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (j)>,
                                        affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]}
      ins(%h, %b1 : tensor<1024x512xf32>, tensor<512xf32>) outs(%e1 : tensor<1024x512xf32>) {
  ^bb0(%hv: f32, %bv: f32, %o: f32):
    %s = arith.addf %hv, %bv : f32
    %r = arith.maximumf %s, %zero : f32
    linalg.yield %r : f32
  } -> tensor<1024x512xf32>
  %e2 = tensor.empty() : tensor<1024x128xf32>
  %f2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<1024x128xf32>) -> tensor<1024x128xf32>
  %y = linalg.matmul ins(%a, %w2 : tensor<1024x512xf32>, tensor<512x128xf32>)
                     outs(%f2 : tensor<1024x128xf32>) -> tensor<1024x128xf32>
  return %y : tensor<1024x128xf32>
}
