"""Facts about this host's CPU, read one way: the first processor's fields in /proc/cpuinfo (its model and
flags: which instructions the kernels may use, what the kernel cache keys on) and the cores this process may
run on (how many ranks fit, how many processes a search forks, whether a waiting rank may spin)."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=1)
def cpu_info() -> dict[str, str]:
    """The first processor's fields in /proc/cpuinfo (`model name`, `flags`, ...); empty where there is none."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    fields = {}
    for line in text.splitlines():
        if not line.strip():
            break  # the first processor is enough
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields


def cpu_flags() -> frozenset[str]:
    """The first processor's flags (`flags`; `Features` on Arm); empty where there is no /proc/cpuinfo."""
    info = cpu_info()
    return frozenset(info.get("flags", info.get("Features", "")).split())


def host_cores() -> int:
    """Cores this process may run on (its CPU affinity, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


__all__ = ["cpu_flags", "cpu_info", "host_cores"]
