"""The package's layers import one way (docs/architecture.md): import-linter's `layers` contracts in
pyproject.toml (the package's layers, and the runtime's subpackages), checked on the whole package (python/slicer/
and the mapped dialect/, lowering/, runtime/), every import statement counted, function-local ones too."""

import ast
import subprocess
import sys
from pathlib import Path

import grimp
from package_tree import package_files, parsed, relative

ROOT = Path(__file__).resolve().parents[3]


def test_the_layers_contract_holds():
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint), "--config", str(ROOT / "pyproject.toml")], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 2 kept, 0 broken." in done.stdout


def test_the_contract_sees_the_whole_package():
    graph = grimp.build_graph("slicer")
    for module in ("slicer.dialect.verifier", "slicer.lowering.jit", "slicer.runtime.execution.executor",
                   "slicer.core.names"):
        assert module in graph.modules
    assert graph.direct_import_exists(importer="slicer.runtime.execution.executor", imported="slicer.lowering")


def test_only_optional_dependencies_are_imported_inside_functions():
    allowed = {"mpi4py", "matplotlib", "torch", "torch_mlir"}  # optional dependencies (MPI runs, viz, PyTorch frontend)
    # Costly to import (ml_dtypes' extension; mlir.runtime imports it), loaded where first needed:
    # a bf16 dtype (core/dtypes.py), a JIT call's memref descriptors (lowering/jit.py).
    costly = {"ml_dtypes", "mlir.runtime"}
    found = []
    for path in package_files():
        for node in ast.walk(parsed(path)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for inner in ast.walk(node):
                if isinstance(inner, (ast.Import, ast.ImportFrom)):
                    modules = [a.name for a in inner.names] if isinstance(inner, ast.Import) else [inner.module or ""]
                    if any(m.split(".")[0] not in allowed and m not in costly for m in modules):
                        found.append(f"{relative(path)}:{inner.lineno}: {modules}")
    assert not found, "function-local imports of non-optional modules:\n" + "\n".join(found)
