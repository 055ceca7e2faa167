// Bad input gives a located error and exit code 1; a bad command line (unknown pass or option, unreadable
// input) a one-line error and exit code 2 (the codes: test/unit/tools/test_cli_convention.py).
// RUN: not slicer-opt %s 2>&1 | FileCheck %s --check-prefix=MALFORMED
// RUN: not slicer-opt %S/Inputs/unknown-axis.mlir 2>&1 | FileCheck %s --check-prefix=AXIS
// RUN: not slicer-opt %S/Inputs/unknown-axis.mlir -p no-such-pass 2>&1 | FileCheck %s --check-prefix=PASS
// RUN: not slicer-opt %S/Inputs/unknown-axis.mlir -p slicer-no-such-pass 2>&1 | FileCheck %s --check-prefix=SPASS
// RUN: not slicer-opt %S/Inputs/no-such-file.mlir 2>&1 | FileCheck %s --check-prefix=NOFILE
// RUN: not slicer-opt %S/Inputs/unknown-axis.mlir -p 'slicer-lower-to-loops{bogus=1}' 2>&1 | FileCheck %s --check-prefix=OPTION
// RUN: slicer-opt --list-passes | FileCheck %s --check-prefix=LIST
// RUN: slicer-opt %S/Inputs/unknown-axis.mlir --no-implicit-verify --output %t && FileCheck %s --check-prefix=OUT < %t

// MALFORMED: slicer-opt-errors.mlir:[[# @LINE + 2]]:21: error: expected ':'
func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = arith.negf %a tensor<4xf32>
  return %0 : tensor<4xf32>
}

// AXIS: unknown-axis.mlir:4:8: error: unknown mesh axis 'z' in !slicer.range<z> (mesh @mesh has axes x, y)
// PASS: slicer-opt: error: bad pipeline element 'no-such-pass': 'no-such-pass' does not refer to a registered pass or pass pipeline
// SPASS: slicer-opt: error: unknown slicer pass 'slicer-no-such-pass' (slicer passes: {{.*}}slicer-lower-to-loops
// NOFILE: slicer-opt: error: cannot read '{{.*}}no-such-file.mlir'
// OPTION: slicer-opt: error: pass 'slicer-lower-to-loops' has no option 'bogus'
// OUT: slicer.mesh
// LIST: Slicer passes:
// LIST: slicer-kernel-rows
// LIST-NEXT: unroll=4
// LIST: slicer-lower-to-loops
// LIST: slicer-verify
// LIST: Upstream MLIR passes
// LIST: canonicalize
// LIST: one-shot-bufferize
