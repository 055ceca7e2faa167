"""Run timelines (slicer.viz.timeline) from Timings: a Chrome trace that chrome://tracing / Perfetto read
(Trace Event Format), a PNG, and a terminal rendering."""

import json

import pytest

import slicer
from slicer.core.mesh import Mesh
from slicer.runtime.timings import StepTiming, Timings
from slicer.viz import chrome_trace, timeline_png, timeline_text, write_chrome_trace

MS = 1e-3


def two_rank_timings() -> Timings:
    events = (
        (("kernel_0", "kernel", 0.0, 0.0, 1 * MS), ("all_reduce {'mesh_axes': ['y']}", "collective", 1 * MS, 3 * MS, 4 * MS)),
        (("kernel_0", "kernel", 0.0, 0.0, 2 * MS), ("all_reduce {'mesh_axes': ['y']}", "collective", 2 * MS, 3 * MS, 4 * MS)),
    )
    steps = (StepTiming("kernel_0", "kernel", 2 * MS), StepTiming("all_reduce {'mesh_axes': ['y']}", "collective", 3 * MS, 2 * MS))
    return Timings(4 * MS, steps, 2, 3, events=events, peak_bytes=(100, 100))


def test_chrome_trace_is_the_trace_event_format(tmp_path):
    path = write_chrome_trace(two_rank_timings(), tmp_path / "out" / "trace.json", Mesh(y=2))
    data = json.loads(path.read_text())
    events = data["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    for e in complete:
        assert {"name", "ph", "ts", "dur", "pid", "tid", "cat"} <= set(e) and e["dur"] >= 0
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {0: "rank 0 (y=0)", 1: "rank 1 (y=1)"}
    rank1 = [(e["name"], e["cat"], e["ts"], e["dur"]) for e in complete if e["pid"] == 1]
    assert rank1 == [("kernel_0", "kernel", 0.0, 2000.0), ("all_reduce", "collective", 2000.0, 2000.0),
                     ("waiting", "waiting", 2000.0, 1000.0), ("transfer", "transfer", 3000.0, 1000.0)]
    assert data["otherData"]["ranks"] == 2 and data["displayTimeUnit"] == "ms"


def test_timeline_text_marks_compute_waiting_and_transfer():
    text = timeline_text(two_rank_timings(), width=8, mesh=Mesh(y=2))
    lines = text.splitlines()
    assert lines[0].startswith("timeline of the last timed run (4.000 ms")
    assert lines[1] == "  rank 0 (y=0) │██░░░░▓▓│"
    assert lines[2] == "  rank 1 (y=1) │████░░▓▓│"


def test_timeline_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = timeline_png(two_rank_timings(), tmp_path / "timeline.png", mesh=Mesh(y=2))
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert int.from_bytes(data[16:20], "big") > 500


def test_timings_without_a_timeline_are_refused(tmp_path):
    empty = Timings(0.001, (), 2, 1)
    for draw in (lambda: chrome_trace(empty), lambda: timeline_text(empty),
                 lambda: timeline_png(empty, tmp_path / "t.png")):
        with pytest.raises(slicer.VizError, match="no timeline"):
            draw()
    with pytest.raises(slicer.VizError, match="needs the Timings of an MPI run"):
        chrome_trace([1, 2])


def test_timings_round_trip_their_memory_and_events():
    timings = two_rank_timings()
    again = Timings.from_json(timings.to_json())
    assert again.peak_bytes == (100, 100) and again.events == timings.events
    old = json.loads(timings.to_json())
    del old["peak_bytes"]  # written before peaks were measured
    assert Timings.from_json(json.dumps(old)).peak_bytes == ()
