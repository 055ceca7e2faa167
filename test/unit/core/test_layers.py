"""The package's layers import one way (docs/architecture.md): import-linter's `layers` contract in
pyproject.toml, checked on the whole package tree (the linked dialect/, lowering/, runtime/ included), every
import statement counted, function-local ones too."""

import os
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[3]


def test_the_layers_contract_holds():
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint), "--config", str(ROOT / "pyproject.toml")], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT / "python")))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 1 kept, 0 broken." in done.stdout


def test_the_contract_sees_the_whole_package():
    graph = grimp.build_graph("slicer")
    for module in ("slicer.dialect.verifier", "slicer.lowering.jit", "slicer.runtime.executor", "slicer.core.names"):
        assert module in graph.modules
    assert graph.direct_import_exists(importer="slicer.runtime.executor", imported="slicer.lowering")


def test_only_optional_dependencies_are_imported_inside_functions():
    import ast

    allowed = {"mpi4py", "matplotlib", "torch", "torch_mlir"}  # optional dependencies (MPI runs, viz, PyTorch frontend)
    # Costly to import (ml_dtypes' extension: ~0.5 s of CPU; mlir.runtime imports it), loaded where first needed:
    # a bf16 dtype (core/dtypes.py), a JIT call's memref descriptors (lowering/jit.py).
    costly = {"ml_dtypes", "mlir.runtime"}
    found = []
    package = ROOT / "python" / "slicer"
    for root, _, files in os.walk(package, followlinks=True):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = Path(root) / name
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    for inner in ast.walk(node):
                        if isinstance(inner, (ast.Import, ast.ImportFrom)):
                            modules = (
                                [a.name for a in inner.names] if isinstance(inner, ast.Import) else [inner.module or ""]
                            )
                            if any(m.split(".")[0] not in allowed and m not in costly for m in modules):
                                found.append(f"{path.relative_to(package)}:{inner.lineno}: {modules}")
    assert not found, "function-local imports of non-optional modules:\n" + "\n".join(found)
