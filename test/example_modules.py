"""What several tests share: the Python modules of `examples/` (loaded by path: `examples/` is runnable
scripts, not a package), the collective ops a compiled program holds, and small programs more than one test runs.

Importable from any test as `import example_modules`: pytest puts `test/` on `sys.path` for its
`conftest.py` (rootdir-less directory, the default `prepend` import mode)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def load(relative: str, name: str) -> ModuleType:
    """The module of `examples/<relative>` (e.g. "torch/models.py"), executed under `name`."""
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def collective_ops(prog) -> list[str]:
    """The op names of `prog`'s collectives in program order (e.g. ["shard.all_reduce"])."""
    from mlir import ir

    from slicer.dialect import make_context
    from slicer.spmd import report

    with make_context():
        return [c.op for c in report(ir.Module.parse(prog.spmd)).collectives]


THREE_LAYERS = """
func.func @mlp(%x: tensor<16x256xf32>, %w1: tensor<256x256xf32>, %w2: tensor<256x256xf32>, %w3: tensor<256x256xf32>)
    -> tensor<16x256xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<16x256xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<16x256xf32>) -> tensor<16x256xf32>
  %h1 = linalg.matmul ins(%x, %w1 : tensor<16x256xf32>, tensor<256x256xf32>) outs(%f : tensor<16x256xf32>)
      -> tensor<16x256xf32>
  %h2 = linalg.matmul ins(%h1, %w2 : tensor<16x256xf32>, tensor<256x256xf32>) outs(%f : tensor<16x256xf32>)
      -> tensor<16x256xf32>
  %h3 = linalg.matmul ins(%h2, %w3 : tensor<16x256xf32>, tensor<256x256xf32>) outs(%f : tensor<16x256xf32>)
      -> tensor<16x256xf32>
  return %h3 : tensor<16x256xf32>
}
"""
"""Three 256-wide products, x @ w1 @ w2 @ w3 (with `ZERO3`: each weight all_gathered before its product)."""

ZERO3 = "arg0.0=x;arg1.0=x;arg2.0=x;arg3.0=x"
"""`THREE_LAYERS` under ZeRO-3 over x: the batch and every weight tiled by rows."""
