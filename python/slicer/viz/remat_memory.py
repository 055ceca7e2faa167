"""What rematerialisation did to a program's memory (docs/remat.md): per recomputed module, the bytes per device
of the activations its backward reads that are still saved from the forward pass and those now recomputed, and
the planned peak with and without remat (the same kernel-graph liveness `memory.py` counts, of the program
before `slicer-remat` and after). Read from the `slicer.remat_units` the pass records on the function."""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from slicer.core.functions import entry_function
from slicer.dialect import make_context
from slicer.runtime.jobs.resources import human_bytes
from slicer.spmd.rematerialize import read_units


@dataclass(frozen=True)
class RematUnit:
    """One recomputed module: its policy, bytes saved and recomputed (per device; a pipeline stage's, recorded
    by `frontends/stage_partition.py`: one micro-batch's, whole), ops cloned (recomputed)."""

    name: str
    policy: str
    saved: int
    recomputed: int
    cloned: int


@dataclass(frozen=True)
class RematReport:
    units: tuple[RematUnit, ...]
    peak: int
    """Planned peak bytes per device with remat."""
    peak_without: int
    """Planned peak bytes per device of the same program without remat."""

    @property
    def saved(self) -> int:
        return sum(u.saved for u in self.units)

    @property
    def recomputed(self) -> int:
        return sum(u.recomputed for u in self.units)

    def text(self) -> str:
        lines = ["  rematerialisation (per module, bytes per device of what its backward reads of the forward):"]
        width = max((len(u.name) for u in self.units), default=0)
        for u in self.units:
            lines.append(f"    {u.name:<{width}}  {u.policy:<10} saved {human_bytes(u.saved):>10}, recomputed "
                         f"{human_bytes(u.recomputed):>10} ({u.cloned} ops cloned)")
        change = f" ({self.peak / self.peak_without:.2f}x)" if self.peak_without else ""
        lines.append(f"    in all: saved {human_bytes(self.saved)}, recomputed {human_bytes(self.recomputed)}; peak "
                     f"{human_bytes(self.peak)} with remat, {human_bytes(self.peak_without)} without{change}")
        return "\n".join(lines)


def remat_units(spmd: str, entry: str | None = None) -> tuple[RematUnit, ...]:
    """The units `slicer-remat` recorded on the entry function of the SPMD program `spmd` (text)."""
    with make_context():
        module = ir.Module.parse(spmd)
        attributes = entry_function(module.operation, entry).attributes
        return tuple(RematUnit(*fields) for fields in read_units(attributes))


__all__ = ["RematReport", "RematUnit", "remat_units"]
