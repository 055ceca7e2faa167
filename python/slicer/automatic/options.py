"""The search's inputs checked once: the mesh, the memory budget (bytes per device, or "2GiB", "512MiB", "1.5e9")
and the objective; each bad value is an `AutoError` that says what to give instead."""

from __future__ import annotations

import math
import re

from slicer.core.errors import AutoError, MeshError
from slicer.core.mesh import Mesh

OBJECTIVES = ("time", "memory")
_UNITS = {"": 1, "b": 1, "k": 10 ** 3, "kb": 10 ** 3, "m": 10 ** 6, "mb": 10 ** 6, "g": 10 ** 9, "gb": 10 ** 9,
          "t": 10 ** 12, "tb": 10 ** 12, "kib": 2 ** 10, "mib": 2 ** 20, "gib": 2 ** 30, "tib": 2 ** 40}
_BUDGET = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_budget(budget) -> int | None:
    """Bytes per device from an int, a float, or text with a unit (B, KB, MB, GB, TB: powers of 1000; KiB,
    MiB, GiB, TiB: powers of 1024); None stays None (no budget)."""
    if budget is None:
        return None
    if isinstance(budget, bool):
        raise AutoError(f"memory budget {budget!r}: give bytes per device (an int, or text like '2GiB', '512MiB')")
    if isinstance(budget, (int, float)):
        value = float(budget)
    elif isinstance(budget, str):
        match = _BUDGET.match(budget)
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _UNITS:
            raise AutoError(f"memory budget {budget!r} does not parse: give bytes per device as a number with an "
                            "optional unit (B, KB, MB, GB, KiB, MiB, GiB), e.g. '2GiB', '512MiB' or 1000000")
        value = float(match.group(1)) * _UNITS[unit]
    else:
        raise AutoError(f"memory budget {budget!r}: give bytes per device (an int, or text like '2GiB', '512MiB')")
    if not math.isfinite(value) or value <= 0:
        raise AutoError(f"memory budget {budget!r} must be a positive number of bytes per device")
    return int(value)


def check_mesh(mesh) -> Mesh:
    """`mesh` as a Mesh: a Mesh, a mapping {axis: size} or text 'x=2,y=2'."""
    try:
        return Mesh.coerce(mesh)
    except MeshError as exc:
        raise AutoError(str(exc)) from None


def check_objective(objective) -> str:
    if objective not in OBJECTIVES:
        raise AutoError(f"objective {objective!r}: use one of {', '.join(map(repr, OBJECTIVES))} (time: the fastest "
                        "partitioning within the budget; memory: the smallest peak per device)")
    return objective


def format_bytes(count: float) -> str:
    for unit, size in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if count >= size:
            return f"{count / size:.4g} {unit}"
    return f"{int(count)} B"
