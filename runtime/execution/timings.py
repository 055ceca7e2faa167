"""What a run measured: per step (kernel or collective) the time of the slowest rank, median over the timed
runs, with a collective's time split into waiting for the other ranks, packing, transfer and unpacking, plus
how long it was in flight while other steps ran (overlap); and each rank's timeline of the last run.

Collected by `timed_run.timed_run` on every rank (`RankExecutor.run(..., timed=True)`: a barrier before each
collective starts, so its wait is the ranks' skew) and reduced where the ranks' parts meet (`timed_run.combine`:
the driver, or rank 0 of the user's job). Pictures of it (a timeline per rank, a Chrome trace) are
`slicer.viz.timeline`.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Event:
    """One action of a rank's run, seconds from the run's start. `kind` is "kernel", "start" (a collective
    is started: `parts` has "skew", waiting for the other ranks at the barrier of timed runs, and "pack",
    packing and issuing the MPI call) or "wait" (where its output is first needed: "transfer", blocked until
    the transfer completed, and "unpack")."""

    node: int
    label: str
    kind: str
    start: float
    end: float
    parts: dict = field(default_factory=dict)


@dataclass(frozen=True)
class StepTiming:
    """One node of the kernel graph: `kind` is "kernel" or "collective"; every number is a median over runs
    of the slowest rank's time. `seconds` is the time the rank was busy with or blocked by the step; for a
    collective `wait` is the time spent waiting for the other ranks before it (0 for kernels), then `pack`
    (packing, issuing the call), `transfer` (blocked waiting for the transfer) and `unpack`; `overlap` is how
    long the collective was in flight while other steps ran (not included in `seconds`)."""

    label: str
    kind: str
    seconds: float
    wait: float = 0.0
    pack: float = 0.0
    transfer: float = 0.0
    unpack: float = 0.0
    overlap: float = 0.0


@dataclass(frozen=True)
class Timings:
    """A run's timings: total (median over `repeat` timed runs of the slowest rank), per step, and what was
    compiled or loaded. `events[rank]` is that rank's timeline (`Event`s) of the last run without barriers.
    `peak_bytes[rank]`: the most bytes of blocks that rank's executor held at once (arguments, kernel outputs,
    collective results; `slicer.runtime.execution.buffer_tracker`), over all runs."""

    seconds: float
    steps: tuple[StepTiming, ...]
    ranks: int
    repeat: int
    compile_seconds_max: float = 0.0
    kernel_cache_misses: int = 0
    kernel_backends: tuple[str, ...] = ()
    events: tuple[tuple[Event, ...], ...] = field(default=(), repr=False)
    peak_bytes: tuple[int, ...] = ()

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @staticmethod
    def from_json(text: str) -> Timings:
        data = json.loads(text)
        data["steps"] = tuple(StepTiming(**s) for s in data["steps"])
        data["kernel_backends"] = tuple(data["kernel_backends"])
        data["events"] = tuple(tuple(Event(**e) for e in rank) for rank in data["events"])
        data["peak_bytes"] = tuple(data.get("peak_bytes", ()))
        return Timings(**data)

    def text(self) -> str:
        lines = [f"{self.seconds * 1e3:.3f} ms per run on {self.ranks} ranks (median of {self.repeat}, slowest rank)"]
        for step in self.steps:
            split = ""
            if step.kind == "collective":
                split = (f"  (waiting {step.wait * 1e3:.3f}, pack {step.pack * 1e3:.3f}, transfer "
                         f"{step.transfer * 1e3:.3f}, unpack {step.unpack * 1e3:.3f} ms"
                         + (f"; overlapped {step.overlap * 1e3:.3f} ms)" if step.overlap > 0 else ")"))
            lines.append(f"   {step.seconds * 1e3:9.3f} ms  {step.label}{split}")
        return "\n".join(lines)


def node_timings(events: list[Event]) -> dict[int, dict]:
    """One rank's run, per node: its kind, label and the seconds of each part (see `StepTiming`)."""
    out: dict[int, dict] = {}
    for e in events:
        entry = out.setdefault(e.node, {"label": e.label, "kind": "kernel" if e.kind == "kernel" else "collective",
                                        "seconds": 0.0, "wait": 0.0, "pack": 0.0, "transfer": 0.0, "unpack": 0.0,
                                        "overlap": 0.0})
        entry["seconds"] += e.end - e.start
        if e.kind == "start":
            entry["wait"] += e.parts.get("skew", 0.0)
            entry["pack"] += e.parts.get("pack", 0.0)
            entry["_started"] = e.end
        elif e.kind == "wait":
            entry["transfer"] += e.parts.get("transfer", 0.0)
            entry["unpack"] += e.parts.get("unpack", 0.0)
            entry["overlap"] += max(0.0, e.start - entry.pop("_started", e.start))
    return out


def reduce_runs(per_rank: list[list[list[Event]]], totals: list[list[float]]) -> tuple[float, tuple[StepTiming, ...]]:
    """`per_rank[r][run]` = that run's events on rank r; `totals[r][run]` the run's wall time there. Per step,
    part and run the slowest rank counts; then the median over runs. Steps are in node order."""
    runs = len(totals[0])
    seconds = statistics.median(max(totals[r][run] for r in range(len(totals))) for run in range(runs))
    per = [[node_timings(per_rank[r][run]) for run in range(runs)] for r in range(len(per_rank))]
    steps = []
    for node in sorted(per[0][0]):
        first = per[0][0][node]
        values = {}
        for part in ("seconds", "wait", "pack", "transfer", "unpack", "overlap"):
            values[part] = statistics.median(max(per[r][run][node][part] for r in range(len(per)))
                                             for run in range(runs))
        steps.append(StepTiming(first["label"], first["kind"], **values))
    return seconds, tuple(steps)
