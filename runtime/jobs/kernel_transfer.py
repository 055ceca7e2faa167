"""Kernels for ranks on other hosts: by cache key, from the host's own cache, or as bytes from the driver.

The driver compiles (or finds in its cache) a program's kernels once (`executor.load_kernels`) and tells the
ranks each kernel's cache key (`executor.kernel_sources`). A rank looks the keys up in its own host's cache
(`~/.cache/slicer/kernels`, or `SLICER_CACHE_DIR` as that host sees it): on the driver's host, or a host
whose file system holds the same cache, every key is there. A host with the same CPU as the driver (the same
`host_cpu`, so the same keys) that lacks some receives those libraries' bytes from the driver over the link
(`KernelCache.receive`: checked against their sha256) instead of compiling them; a host with another CPU
compiles the program's kernels itself, once per host (the cache's lock serialises that host's ranks).

Two requests make a load (`program_load.load_program`): ("kernels", cpu, keys), to which each rank replies the
keys it lacks (None: another CPU, it compiles), then ("load", ..., libraries) with the bytes it lacked.
"""

from __future__ import annotations

from slicer.lowering import KernelGraph
from slicer.lowering.cache import KernelCache, host_cpu

from ..execution.executor import JIT, kernel_sources, load_kernels


def cache_keys(sources: dict) -> list[str]:
    """The distinct cache keys `sources` (`executor.kernel_sources`) names (none for the JIT)."""
    if sources.get("backend") == JIT:
        return []
    return sorted({source["key"] for source in sources["kernels"].values()})


def missing_keys(cpu: str, keys: list[str]) -> list[str] | None:
    """A rank's answer to ("kernels", cpu, keys): the keys its host's cache lacks, or None when this host's CPU
    is not `cpu` (its ranks compile the kernels here)."""
    if cpu != host_cpu():
        return None
    cache = KernelCache()
    return [key for key in keys if cache.lookup(key) is None]


def libraries(keys: list[str]) -> dict[str, tuple[dict, bytes]]:
    """The driver's libraries of `keys` as key -> (meta, bytes), each distinct file read once (keys built
    together share one library)."""
    cache, read = KernelCache(), {}
    found = {}
    for key in keys:
        entry = cache.load(key)
        meta, path = entry.meta, entry.library
        if path not in read:
            read[path] = path.read_bytes()
        found[key] = (meta, read[path])
    return found


def local_sources(graph: KernelGraph, sources: dict, received: dict[str, tuple[dict, bytes]] | None) -> dict:
    """On a rank: `sources` as this host serves them. `received` None: another CPU, so the kernels are compiled
    (or found) in this host's cache; else the received libraries are stored first, and every key is loaded
    from this host's cache."""
    if sources.get("backend") == JIT:
        return sources
    if received is None:
        return kernel_sources(*load_kernels(graph))
    cache = KernelCache()
    for key, (meta, data) in received.items():
        cache.receive(key, meta, data)
    root = str(cache.root)
    return dict(sources, kernels={name: dict(source, cache=root) for name, source in sources["kernels"].items()})


__all__ = ["cache_keys", "libraries", "local_sources", "missing_keys"]
