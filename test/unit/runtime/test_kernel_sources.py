"""The driver tells the ranks their compiled kernels' cache keys (`kernel_sources`), so a rank loads them without
the MLIR bindings; an entry missing or changed since is a clear KernelError, never a wrong kernel. A host whose
cache lacks them (another machine) and has the driver's CPU receives the libraries' bytes, checked
(`runtime.jobs.kernel_transfer`)."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import slicer
from slicer.core.errors import KernelError
from slicer.lowering import KernelNode
from slicer.lowering.cache import host_cpu
from slicer.runtime.execution.executor import kernel_sources, kernels_from_sources, load_kernels
from slicer.runtime.jobs.kernel_transfer import cache_keys, libraries, local_sources, missing_keys

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def graph():
    text = (ROOT / "examples" / "mlp.mlir").read_text()
    return slicer.compile(text, mesh=slicer.Mesh(x=2), tactics=[slicer.Tile(arg=0, dim=0, axes="x")]).graph


def test_a_rank_imports_no_mlir():
    code = "import slicer.runtime.jobs.rank_server, sys; print([m for m in sys.modules if m.startswith('mlir')])"
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


def test_a_host_without_the_kernels_receives_them_checked(graph, tmp_path, monkeypatch):
    """Another host's empty cache (same CPU): it lacks every key, stores the driver's bytes, loads equal kernels;
    bytes that do not match their checksum are refused; a host with another CPU compiles its own."""
    kernels, backend = load_kernels(graph)
    sources = kernel_sources(kernels, backend)
    keys = cache_keys(sources)
    sent = libraries(keys)  # read from the driver's cache, before this "host" gets its own
    monkeypatch.setenv("SLICER_CACHE_DIR", str(tmp_path / "other-host"))
    assert missing_keys(host_cpu(), keys) == keys and missing_keys("another:cpu", keys) is None
    key = keys[0]
    meta, data = sent[key]
    with pytest.raises(KernelError, match="does not match"):
        local_sources(graph, sources, {key: (meta, data[:-1] + bytes([data[-1] ^ 1]))})
    here = local_sources(graph, sources, sent)
    assert missing_keys(host_cpu(), keys) == []
    assert {s["cache"] for s in here["kernels"].values()} == {str(tmp_path / "other-host")}
    loaded, _ = kernels_from_sources(graph, here)
    for name, kernel in kernels.items():
        inputs = [np.full(s.shape, 0.5, s.dtype) for s in kernel.inputs]
        for mine, theirs in zip(np.atleast_1d(kernel(*inputs)), np.atleast_1d(loaded[name](*inputs)), strict=True):
            np.testing.assert_array_equal(mine, theirs)
