"""What this host can run: cores for local ranks, memory for every rank's blocks.

Checked before a job starts, so an impossible run is refused with a message naming the numbers instead of
ranks spinning on a fraction of a core each or dying while allocating terabytes.

- `check_ranks(ranks, oversubscribe)`: more local ranks than cores only with `oversubscribe` (as OpenMPI's
  `mpiexec --oversubscribe`; MPICH would silently start them all).
- `check_memory(graph, ranks)`: the peak bytes one device holds (`KernelGraph.peak_bytes_per_device`, a
  liveness count of its blocks) times the ranks on this host must fit the host's available memory.
- `check_hosts(reports, graph)`: the same two checks per host for a job whose ranks may run on several
  (mpiexec -hosts / a hostfile): each rank reports its host's name, cores and memory when it connects
  (`rank_job.RankJob.hosts`), and each host is counted with its own ranks.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from slicer.core import environment
from slicer.core.errors import ResourceError
from slicer.core.host import host_cores
from slicer.lowering import KernelGraph

OVERSUBSCRIBE_ENV = environment.OVERSUBSCRIBE.name


def available_memory() -> int | None:
    """Bytes of memory available to new processes (Linux `MemAvailable`), or None when unknown."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def human_bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(count) < 1024 or unit == "PiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} PiB"  # pragma: no cover - the loop always returns


def check_ranks(ranks: int, oversubscribe: bool = False) -> None:
    """Refuse more local ranks than cores unless `oversubscribe` (or SLICER_OVERSUBSCRIBE=1)."""
    cores = host_cores()
    if ranks <= cores or oversubscribe or environment.value(environment.OVERSUBSCRIBE) == "1":
        return
    raise ResourceError(f"{ranks} ranks on this host's {cores} cores: each rank would get {cores / ranks:.2g} of a "
                        f"core. Use a smaller mesh, or run anyway with --oversubscribe (slicer-run) / "
                        f"oversubscribe=True (Program.run)")


def describe_value(graph: KernelGraph, name: str) -> str:
    v = graph.values[name]
    if name in graph.args:
        what = f"argument #{graph.args.index(name)}"
    elif name in graph.results:
        what = f"result #{graph.results.index(name)}"
    else:
        what = f"intermediate {name}"
    return f"{what} of @{graph.entry} ({v.dtype}{list(v.dist.shape)} as {v.dist}, block {list(v.local_shape)})"


def check_memory(graph: KernelGraph, ranks: int, *, extra: int = 0, what: str = "local MPI ranks") -> None:
    """Refuse a run whose `ranks` devices on this host (plus `extra` bytes, e.g. a reference run) cannot
    fit in the available memory; the message names the largest block."""
    available = available_memory()
    if available is None:
        return
    peak, when = graph.peak_bytes_per_device()
    needed = peak * ranks + extra
    if needed <= available:
        return
    name, size = graph.largest_value()
    raise ResourceError(
        f"the run needs about {human_bytes(needed)} ({human_bytes(peak)} per device at its peak, {when}, on "
        f"{ranks} {what}), but this host has {human_bytes(available)} available. The largest block is "
        f"{describe_value(graph, name)}: {human_bytes(size)} per device. Tile it over more devices or use "
        "smaller shapes")


@dataclass(frozen=True)
class HostReport:
    """Where a rank runs, as it reports itself: its host's name, cores it may use, bytes of memory available."""

    name: str
    cores: int
    memory: int | None


def check_hosts(hosts: Sequence[HostReport], graph: KernelGraph | None = None, *, oversubscribe: bool = False) -> None:
    """Refuse a job whose ranks (`hosts[r]`: where rank r runs) outnumber the cores of a host they run on
    (unless `oversubscribe` or SLICER_OVERSUBSCRIBE=1), or whose blocks of `graph` on a host exceed its
    available memory: each host is counted with its own ranks, cores and memory, not the driver's."""
    placed: dict[str, list[int]] = {}
    for rank, host in enumerate(hosts):
        placed.setdefault(host.name, []).append(rank)
    lift = oversubscribe or environment.value(environment.OVERSUBSCRIBE) == "1"
    for name, ranks in placed.items():
        host = hosts[ranks[0]]
        if len(ranks) > host.cores and not lift:
            raise ResourceError(f"{len(ranks)} ranks ({_rank_list(ranks)}) on host {name}'s {host.cores} cores: "
                                f"each would get {host.cores / len(ranks):.2g} of a core. Place fewer ranks there "
                                f"(mpiexec -hosts / hostfile), or run anyway with --oversubscribe / "
                                f"oversubscribe=True")
        if graph is not None and host.memory is not None:
            peak, when = graph.peak_bytes_per_device()
            if peak * len(ranks) > host.memory:
                raise ResourceError(
                    f"the run needs about {human_bytes(peak * len(ranks))} on host {name} ({human_bytes(peak)} per "
                    f"device at its peak, {when}, on its {len(ranks)} ranks), but it has {human_bytes(host.memory)} "
                    "available. Tile the largest values over more devices, place fewer ranks there, or use smaller "
                    "shapes")


def _rank_list(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"
