"""Where a run's time goes: every rank's kernels and collectives on one time axis.

From `Timings.events` (per rank, the last run without barriers: `slicer.runtime.execution.timings.Event`s in seconds
from the run's start). A kernel is compute; a collective has two events: its *start* (its "skew" part, when present,
is waiting for the other ranks; the rest packs its block and issues the transfer) and its *wait*, where its
output is first needed (its "transfer" part is blocked until the data arrived, then "unpack"). Between the two
the collective is *in flight*: with nonblocking collectives that time overlaps the kernels in between. Three
renderings:

- `chrome_trace(timings)`: the Trace Event Format that chrome://tracing and https://ui.perfetto.dev open: one
  process per rank, every event a complete event ("ph": "X") with its parts nested inside, and each collective
  in flight as an async span from its start to its wait;
- `timeline_png(timings, path)`: one row of bars per rank (matplotlib), in-flight collectives as thin lines
  (`timelines_png`: several runs one above the other, on one time axis);
- `timeline_text(timings)`: the same rows in characters, for a terminal.
"""

from __future__ import annotations

import json
from pathlib import Path

from slicer.core.errors import VizError
from slicer.core.mesh import Mesh
from slicer.runtime.execution.timings import Event, Timings

from .block_picture import load_pyplot

KERNEL, WAITING, TRANSFER = "kernel", "waiting", "transfer"
COLORS = {KERNEL: "#4c78a8", WAITING: "#d3d3d3", TRANSFER: "#f58518"}
_WAITING_PARTS = ("skew",)  # parts of a collective's events spent waiting for other ranks


def _events(timings: Timings) -> tuple[tuple[Event, ...], ...]:
    if not isinstance(timings, Timings):
        raise VizError(f"a timeline needs the Timings of an MPI run (prog.run(..., ranks=N, return_timings=True)), "
                       f"not {type(timings).__name__}")
    if not timings.events or not any(timings.events):
        raise VizError("these timings have no timeline (no per-rank events): they come from an MPI run of "
                       "prog.run(..., ranks=N, return_timings=True) or slicer-run")
    return timings.events


def _segments(event: Event) -> list[tuple[str, float, float]]:
    """(kind, start, end) pieces of one event: a kernel is compute; a collective's start and wait are their
    parts in order (waiting for other ranks, else transfer work), the rest of the event as transfer."""
    if event.kind == KERNEL:
        return [(KERNEL, event.start, event.end)]
    pieces, at = [], event.start
    for part, seconds in event.parts.items():
        if seconds > 0:
            end = min(event.end, at + seconds)
            pieces.append((WAITING if part in _WAITING_PARTS else TRANSFER, at, end))
            at = end
    if event.end > at:
        pieces.append((TRANSFER, at, event.end))
    return pieces


def _in_flight(events: tuple[Event, ...]) -> list[tuple[int, str, float, float]]:
    """(node, label, start, end) of each collective between the end of its start and the start of its wait."""
    started, spans = {}, []
    for event in events:
        if event.kind == "start":
            started[event.node] = event.end
        elif event.kind == "wait" and event.node in started:
            spans.append((event.node, event.label, started.pop(event.node), event.start))
    return spans


def _end(events) -> float:
    return max((e.end for rank in events for e in rank), default=0.0) or 1e-9


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
        for event in events:
            common = {"ph": "X", "pid": rank, "tid": 0}
            name = event.label.split(" ")[0] + ("" if event.kind == KERNEL else f" ({event.kind})")
            out.append({**common, "name": name, "cat": event.kind, "ts": us(event.start),
                        "dur": us(event.end - event.start),
                        "args": {"node": event.node, "label": event.label,
                                 **{part: round(seconds * 1e3, 6) for part, seconds in event.parts.items()}}})
            if event.kind != KERNEL:
                for part, begin, finish in _segments(event):
                    out.append({**common, "name": part, "cat": part, "ts": us(begin), "dur": us(finish - begin),
                                "args": {"node": event.node}})
        for node, label, begin, finish in _in_flight(events):
            span = {"name": f"in flight: {label.split(' ')[0]}", "cat": "in flight", "pid": rank, "tid": 0,
                    "id": f"{rank}.{node}"}
            out += [{**span, "ph": "b", "ts": us(begin)}, {**span, "ph": "e", "ts": us(finish)}]
    return {"traceEvents": out, "displayTimeUnit": "ms",
            "otherData": {"ranks": timings.ranks, "repeat": timings.repeat, "median_seconds": timings.seconds,
                          "note": "the last run without barriers; collectives start as soon as their input exists "
                                  "and are waited for where their output is first needed"}}


def write_chrome_trace(timings: Timings, path: str | Path, mesh: Mesh | None = None) -> Path:
    """Write `chrome_trace(timings)` as JSON to `path` (open it in chrome://tracing or ui.perfetto.dev)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(chrome_trace(timings, mesh), indent=None))
    return path


def timeline_text(timings: Timings, width: int = 64, mesh: Mesh | None = None) -> str:
    """One line per rank: `█` kernel, `░` waiting for other ranks, `▓` transfer, `─` a collective in flight,
    space: between steps."""
    events = _events(timings)
    end = _end(events)
    marks = {KERNEL: "█", WAITING: "░", TRANSFER: "▓"}
    names = [_rank_name(rank, mesh) for rank in range(len(events))]
    margin = max(len(n) for n in names)
    lines = [f"timeline of the last run ({end * 1e3:.3f} ms; █ kernel, ░ waiting, ▓ transfer, ─ in flight):"]

    def column(seconds: float) -> int:
        return min(width - 1, int(seconds / end * width + 1e-9))  # 3 ms of 4.5 ms is column 6, not 5.999

    for name, rank_events in zip(names, events):
        row = [" "] * width
        for _, _, begin, finish in _in_flight(rank_events):
            for i in range(column(begin), max(column(begin) + 1, min(width, round(finish / end * width)))):
                row[i] = "─"
        pieces = [piece for event in rank_events for piece in _segments(event) if piece[2] > piece[1]]
        for kind, begin, finish in sorted(pieces, key=lambda p: p[0] == KERNEL):  # a short kernel stays visible
            first = column(begin)
            for i in range(first, max(first + 1, min(width, round(finish / end * width)))):
                row[i] = marks[kind]
        lines.append(f"  {name:<{margin}} │{''.join(row)}│")
    return "\n".join(lines)


def _draw(ax, events, mesh: Mesh | None, end: float) -> None:
    """One run's rows of bars on `ax` (`end`: the run's end, for which labels fit)."""
    for rank, rank_events in enumerate(events):
        for _, _, begin, finish in _in_flight(rank_events):
            ax.plot([begin * 1e3, finish * 1e3], [rank + 0.38, rank + 0.38], color=COLORS[TRANSFER], linewidth=1.5)
        for event in rank_events:
            for kind, begin, finish in _segments(event):
                if finish <= begin:
                    continue
                ax.barh(rank, (finish - begin) * 1e3, left=begin * 1e3, height=0.6, color=COLORS[kind],
                        edgecolor="black", linewidth=0.4, hatch="//" if kind == WAITING else None)
                if (finish - begin) / end > 0.08 and kind != WAITING:
                    ax.text((begin + finish) / 2 * 1e3, rank, event.label.split(" ")[0], ha="center", va="center",
                            fontsize=7, color="white" if kind == KERNEL else "black", clip_on=True)
    ax.set_yticks(range(len(events)))
    ax.set_yticklabels([_rank_name(rank, mesh) for rank in range(len(events))], fontsize=8)
    ax.invert_yaxis()


def _legend(plt, ax, below: float) -> None:
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=COLORS[k], edgecolor="black", hatch="//" if k == WAITING else None)
               for k in (KERNEL, WAITING, TRANSFER)]
    handles.append(plt.Line2D([0], [0], color=COLORS[TRANSFER], linewidth=1.5))
    ax.legend(handles, ["kernel (compute)", "waiting for other ranks", "transfer (pack, blocked, unpack)",
                        "collective in flight"], loc="upper center", bbox_to_anchor=(0.5, below), ncol=4, fontsize=8,
              frameon=False)


def _title(timings: Timings, end: float) -> str:
    return (f"last run on {timings.ranks} ranks: {end * 1e3:.3f} ms (median of {timings.repeat}: "
            f"{timings.seconds * 1e3:.3f} ms)")


def _save(fig, plt, path: Path, dpi: int) -> Path:
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def timeline_png(timings: Timings, path: str | Path, *, mesh: Mesh | None = None, dpi: int = 100) -> Path:
    """Draw the run as bars per rank into a PNG file (matplotlib); returns its path."""
    events = _events(timings)
    plt = load_pyplot()
    end = _end(events)
    fig, ax = plt.subplots(figsize=(11, 1.6 + 0.55 * len(events)))
    _draw(ax, events, mesh, end)
    ax.set_xlim(0, end * 1e3 * 1.01)
    ax.set_xlabel("ms since the run's start")
    _legend(plt, ax, -0.35 if len(events) < 4 else -0.15)
    ax.set_title(_title(timings, end), fontsize=9)
    return _save(fig, plt, Path(path), dpi)


def timelines_png(runs: dict[str, Timings], path: str | Path, *, mesh: Mesh | None = None, dpi: int = 100) -> Path:
    """Several runs (title -> timings) one above the other on one time axis, into a PNG file; returns its path."""
    if not runs:
        raise VizError("timelines_png needs at least one run")
    events = {title: _events(timings) for title, timings in runs.items()}
    plt = load_pyplot()
    end = max(_end(e) for e in events.values())
    heights = [0.6 + 0.55 * len(e) for e in events.values()]
    fig, axes = plt.subplots(len(runs), 1, sharex=True, figsize=(11, 0.9 + sum(heights)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, (title, timings) in zip(axes[:, 0], runs.items()):
        _draw(ax, events[title], mesh, end)
        ax.set_title(f"{title}: {_title(timings, _end(events[title]))}", fontsize=9)
    axes[-1, 0].set_xlim(0, end * 1e3 * 1.01)
    axes[-1, 0].set_xlabel("ms since the run's start")
    _legend(plt, axes[-1, 0], -0.45)
    return _save(fig, plt, Path(path), dpi)
