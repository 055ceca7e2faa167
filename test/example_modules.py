"""What several tests share: the Python modules of `examples/` (loaded by path: `examples/` is runnable
scripts, not a package), and the collective ops a compiled program holds.

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
