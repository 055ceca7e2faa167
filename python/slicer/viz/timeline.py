"""Where a run's time goes: every rank's kernels and collectives on one time axis.

From `Timings.events` (the last timed run: per rank, per node `(label, kind, start, wait_end, end)` in seconds
from the run's start; a collective first waits at a barrier for the other ranks, so `start..wait_end` is
waiting and `wait_end..end` the transfer). Three renderings:

- `chrome_trace(timings)`: the Trace Event Format that chrome://tracing and https://ui.perfetto.dev open: one
  process per rank, every node a complete event ("ph": "X"), a collective's waiting and transfer nested inside;
- `timeline_png(timings, path)`: one row of bars per rank (matplotlib);
- `timeline_text(timings)`: the same rows in characters, for a terminal.
"""

from __future__ import annotations

import json
from pathlib import Path

from slicer.core.errors import VizError
from slicer.core.mesh import Mesh
from slicer.runtime.timings import Timings

from .sharding import load_pyplot

KERNEL, WAITING, TRANSFER = "kernel", "waiting", "transfer"
COLORS = {KERNEL: "#4c78a8", WAITING: "#d3d3d3", TRANSFER: "#f58518"}


def _events(timings: Timings):
    if not isinstance(timings, Timings):
        raise VizError(f"a timeline needs the Timings of an MPI run (prog.run(..., ranks=N, return_timings=True)), "
                       f"not {type(timings).__name__}")
    if not timings.events or not any(timings.events):
        raise VizError("these timings have no timeline (no per-rank events): they come from an MPI run of "
                       "prog.run(..., ranks=N, return_timings=True) or slicer-run")
    return timings.events


def _segments(event) -> list[tuple[str, float, float]]:
    """(kind, start, end) pieces of one event: a kernel is compute, a collective waiting then transfer."""
    label, kind, start, wait_end, end = event
    if kind == "collective":
        return [(WAITING, start, wait_end), (TRANSFER, wait_end, end)]
    return [(KERNEL, start, end)]


def _rank_name(rank: int, mesh: Mesh | None) -> str:
    if mesh is None or mesh.device_count <= rank:
        return f"rank {rank}"
    return f"rank {rank} ({','.join(f'{a}={c}' for a, c in zip(mesh.axis_names, mesh.coords(rank)))})"


def chrome_trace(timings: Timings, mesh: Mesh | None = None) -> dict:
    """The run as a Trace Event Format object (`{"traceEvents": [...]}`; times in microseconds)."""
    out = []

    def us(seconds: float) -> float:
        return round(seconds * 1e6, 3)

    for rank, events in enumerate(_events(timings)):
        out.append({"name": "process_name", "ph": "M", "pid": rank, "tid": 0, "args": {"name": _rank_name(rank, mesh)}})
        out.append({"name": "process_sort_index", "ph": "M", "pid": rank, "tid": 0, "args": {"sort_index": rank}})
        out.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": 0, "args": {"name": "steps"}})
        for index, event in enumerate(events):
            label, kind, start, wait_end, end = event
            common = {"ph": "X", "pid": rank, "tid": 0}
            out.append({**common, "name": label.split(" ")[0], "cat": kind, "ts": us(start), "dur": us(end - start),
                        "args": {"step": index, "label": label}})
            if kind == "collective":
                for part, begin, finish in _segments(event):
                    out.append({**common, "name": part, "cat": part, "ts": us(begin), "dur": us(finish - begin),
                                "args": {"step": index}})
    return {"traceEvents": out, "displayTimeUnit": "ms",
            "otherData": {"ranks": timings.ranks, "repeat": timings.repeat, "median_seconds": timings.seconds,
                          "note": "the last timed run; a barrier before each collective separates waiting from "
                                  "transfer"}}


def write_chrome_trace(timings: Timings, path: str | Path, mesh: Mesh | None = None) -> Path:
    """Write `chrome_trace(timings)` as JSON to `path` (open it in chrome://tracing or ui.perfetto.dev)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(chrome_trace(timings, mesh), indent=None))
    return path


def timeline_text(timings: Timings, width: int = 64, mesh: Mesh | None = None) -> str:
    """One line per rank: `█` kernel, `░` waiting for other ranks, `▓` transfer, space: between steps."""
    events = _events(timings)
    end = max((e[4] for rank in events for e in rank), default=0.0) or 1e-9
    marks = {KERNEL: "█", WAITING: "░", TRANSFER: "▓"}
    names = [_rank_name(rank, mesh) for rank in range(len(events))]
    margin = max(len(n) for n in names)
    lines = [f"timeline of the last timed run ({end * 1e3:.3f} ms; █ kernel, ░ waiting, ▓ transfer):"]
    for name, rank_events in zip(names, events):
        row = [" "] * width
        pieces = [piece for event in rank_events for piece in _segments(event) if piece[2] > piece[1]]
        for kind, begin, finish in sorted(pieces, key=lambda p: p[0] == KERNEL):  # a short kernel stays visible
            first = min(width - 1, int(begin / end * width))
            last = max(first + 1, min(width, round(finish / end * width)))
            for i in range(first, last):
                row[i] = marks[kind]
        lines.append(f"  {name:<{margin}} │{''.join(row)}│")
    return "\n".join(lines)


def timeline_png(timings: Timings, path: str | Path, *, mesh: Mesh | None = None, dpi: int = 100) -> Path:
    """Draw the run as bars per rank into a PNG file (matplotlib); returns its path."""
    events = _events(timings)
    plt = load_pyplot()
    path = Path(path)
    end = max((e[4] for rank in events for e in rank), default=0.0) or 1e-9
    fig, ax = plt.subplots(figsize=(11, 1.6 + 0.55 * len(events)))
    for rank, rank_events in enumerate(events):
        for event in rank_events:
            for kind, begin, finish in _segments(event):
                if finish <= begin:
                    continue
                ax.barh(rank, (finish - begin) * 1e3, left=begin * 1e3, height=0.6, color=COLORS[kind],
                        edgecolor="black", linewidth=0.4, hatch="//" if kind == WAITING else None)
                if (finish - begin) / end > 0.08 and kind != WAITING:
                    text = event[0].split(" ")[0]
                    ax.text((begin + finish) / 2 * 1e3, rank, text, ha="center", va="center", fontsize=7,
                            color="white" if kind == KERNEL else "black", clip_on=True)
    ax.set_yticks(range(len(events)))
    ax.set_yticklabels([_rank_name(rank, mesh) for rank in range(len(events))], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, end * 1e3 * 1.01)
    ax.set_xlabel("ms since the run's start")
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=COLORS[k], edgecolor="black", hatch="//" if k == WAITING else None)
               for k in (KERNEL, WAITING, TRANSFER)]
    ax.legend(handles, ["kernel (compute)", "waiting for other ranks", "transfer"], loc="upper center",
              bbox_to_anchor=(0.5, -0.35 if len(events) < 4 else -0.15), ncol=3, fontsize=8, frameon=False)
    ax.set_title(f"last timed run on {timings.ranks} ranks: {end * 1e3:.3f} ms (median of {timings.repeat}: "
                 f"{timings.seconds * 1e3:.3f} ms)", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
