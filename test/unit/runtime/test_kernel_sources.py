"""The launcher tells the ranks where their compiled kernels are (`kernels.json`), so a rank loads them without
the MLIR bindings; an entry missing or changed since is a clear KernelError, never a wrong kernel."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import slicer
from slicer.core.errors import KernelError
from slicer.lowering import KernelNode
from slicer.runtime.executor import kernel_sources, kernels_from_sources, load_kernels

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def graph():
    text = (ROOT / "examples" / "mlp.mlir").read_text()
    return slicer.compile(text, mesh=slicer.Mesh(x=2), tactics=[slicer.Tile(arg=0, dim=0, axes="x")]).graph


def test_a_rank_imports_no_mlir():
    code = "import slicer.runtime.job, sys; print([m for m in sys.modules if m.startswith('mlir')])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_kernels_load_from_their_sources(graph):
    kernels, backend = load_kernels(graph)
    sources = json.loads(json.dumps(kernel_sources(kernels, backend)))
    loaded, loaded_backend = kernels_from_sources(graph, sources)
    assert loaded_backend == backend == "aot"
    assert sorted(loaded) == sorted(kernels)
    for name, kernel in kernels.items():
        inputs = [np.ones(s.shape, s.dtype) for s in kernel.inputs]
        for mine, theirs in zip(np.atleast_1d(kernel(*inputs)), np.atleast_1d(loaded[name](*inputs))):
            np.testing.assert_array_equal(mine, theirs)


def test_jit_sources_compile_in_the_rank(graph):
    kernels, backend = kernels_from_sources(graph, kernel_sources({}, "jit"))
    assert backend == "jit" and sorted(kernels) == sorted(n.name for n in graph.nodes if isinstance(n, KernelNode))


def test_a_missing_or_changed_entry_is_a_kernel_error(graph, tmp_path):
    kernels, backend = load_kernels(graph)
    sources = kernel_sources(kernels, backend)
    source = next(iter(sources["kernels"].values()))
    entry = Path(source["cache"]) / source["key"]
    sources = {**sources, "kernels": {name: {**s, "cache": str(tmp_path)} for name, s in sources["kernels"].items()}}
    with pytest.raises(KernelError, match="cannot be loaded: it does not exist"):
        kernels_from_sources(graph, sources)
    copy = tmp_path / source["key"]
    copy.mkdir()
    meta = json.loads((entry / "meta.json").read_text())
    (copy / "meta.json").write_text(json.dumps(meta))
    (copy / meta["library"]).write_bytes(b"not the library")
    with pytest.raises(KernelError, match="checksum mismatch"):
        kernels_from_sources(graph, sources)
