"""`import torch_mlir` before `import slicer`: torch-mlir's LLVM tables are then the ones MLIR's LLVM reads
(unique symbols bind to the first library loaded), and code generated in this process would call garbage
("JIT session error: Symbols not found", "Unknown function"). The JIT notices (lowering/foreign_llvm.py) and
builds its scalar loops with the LLVM tools. Each case runs in a fresh interpreter: the order is per process."""

import subprocess
import sys

import pytest

pytest.importorskip("torch_mlir")


# exp and remainder call runtime-library functions (expf, fmodf) whose names come from LLVM's table
SCRIPT = """
{first}
import numpy as np
import slicer
from slicer.lowering import jit
from slicer.lowering.foreign_llvm import foreign_llvm_tables
text = '''func.func @f(%a: tensor<64xf32>) -> tensor<64xf32> {{
  %e = tensor.empty() : tensor<64xf32>
  %c = arith.constant 3.0 : f32
  %r = linalg.generic {{indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]}} ins(%a : tensor<64xf32>) outs(%e : tensor<64xf32>) {{
  ^bb0(%x: f32, %o: f32):
    %y = math.exp %x : f32
    %z = arith.remf %y, %c : f32
    linalg.yield %z : f32
  }} -> tensor<64xf32>
  return %r : tensor<64xf32>
}}'''
a = np.linspace(-2, 2, 64, dtype=np.float32)
np.testing.assert_allclose(jit.run(text, a), np.fmod(np.exp(a), np.float32(3)), rtol=1e-5)
print("foreign" if foreign_llvm_tables() else "own", "ok")
"""


@pytest.mark.parametrize("first, tables", [("from torch_mlir import fx", "foreign"), ("", "own")],
                         ids=["torch_mlir-first", "slicer-alone"])
@pytest.mark.slow
def test_the_jit_equals_numpy_in_either_import_order(first, tables):
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(first=first)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [tables, "ok"]
