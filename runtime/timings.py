"""What a run measured: per step (kernel or collective) the time of the slowest rank, median over the timed
runs, with a collective's time split into waiting for the other ranks and transferring.

Collected by `job.run_job` on every rank (`RankExecutor.run(..., timed=True)` waits at a barrier before each
collective, so the wait is the ranks' skew and the rest is the transfer), reduced on rank 0, written as
`timings.json` and read back by the launcher.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class StepTiming:
    """One node of the kernel graph: `kind` is "kernel" or "collective"; seconds are medians over runs of the
    slowest rank's time; `wait` is the time spent waiting for other ranks before a collective (0 for kernels)."""

    label: str
    kind: str
    seconds: float
    wait: float = 0.0

    @property
    def transfer(self) -> float:
        return max(0.0, self.seconds - self.wait) if self.kind == "collective" else 0.0


@dataclass(frozen=True)
class Timings:
    """A run's timings: total (median over `repeat` timed runs of the slowest rank), per step, and what was
    compiled or loaded. `events[rank]` is the last run's timeline on that rank: (label, kind, start, wait_end,
    end) in seconds from the run's start. `peak_bytes[rank]`: the most bytes of blocks that rank's executor
    held at once (arguments, kernel outputs, collective results; `slicer.runtime.memory`), over all runs."""

    seconds: float
    steps: tuple[StepTiming, ...]
    ranks: int
    repeat: int
    compile_seconds_max: float = 0.0
    kernel_cache_misses: int = 0
    kernel_backends: tuple[str, ...] = ()
    events: tuple[tuple[tuple[str, str, float, float, float], ...], ...] = field(default=(), repr=False)
    peak_bytes: tuple[int, ...] = ()

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @staticmethod
    def from_json(text: str) -> "Timings":
        data = json.loads(text)
        data["steps"] = tuple(StepTiming(**s) for s in data["steps"])
        data["kernel_backends"] = tuple(data["kernel_backends"])
        data["events"] = tuple(tuple(tuple(e) for e in rank) for rank in data["events"])
        data["peak_bytes"] = tuple(data.get("peak_bytes", ()))
        return Timings(**data)

    def text(self) -> str:
        lines = [f"{self.seconds * 1e3:.3f} ms per run on {self.ranks} ranks (median of {self.repeat}, slowest rank)"]
        for step in self.steps:
            split = (f"  (transfer {step.transfer * 1e3:.3f} ms, waiting {step.wait * 1e3:.3f} ms)"
                     if step.kind == "collective" else "")
            lines.append(f"   {step.seconds * 1e3:9.3f} ms  {step.label}{split}")
        return "\n".join(lines)


def reduce_runs(per_rank: list[list[list[tuple]]], totals: list[list[float]]) -> tuple[float, tuple[StepTiming, ...]]:
    """`per_rank[r][run]` = that run's events on rank r (label, kind, start, wait_end, end); `totals[r][run]` the
    run's wall time there. Per step and run the slowest rank counts; then the median over runs."""
    runs = len(totals[0])
    seconds = statistics.median(max(totals[r][run] for r in range(len(totals))) for run in range(runs))
    steps = []
    for index, (label, kind, *_rest) in enumerate(per_rank[0][0]):
        durations, waits = [], []
        for run in range(runs):
            events = [per_rank[r][run][index] for r in range(len(per_rank))]
            durations.append(max(e[4] - e[2] for e in events))
            waits.append(max(e[3] - e[2] for e in events))
        steps.append(StepTiming(label, kind, statistics.median(durations), statistics.median(waits)))
    return seconds, tuple(steps)
