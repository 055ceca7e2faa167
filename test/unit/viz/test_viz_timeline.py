"""Run timelines (slicer.viz.timeline) from Timings: a Chrome trace that chrome://tracing / Perfetto read
(Trace Event Format), a PNG, and a terminal rendering."""

import json

import pytest

import slicer
from slicer.core.mesh import Mesh
from slicer.runtime.execution.timings import Event, StepTiming, Timings
from slicer.viz import chrome_trace, timeline_png, timeline_text, timelines_png, write_chrome_trace

MS = 1e-3


AR = "all_reduce {'mesh_axes': ['y']}"


def two_rank_timings() -> Timings:
    """Rank 0 computes 1 ms, starts the all_reduce (waiting 2 ms for rank 1, packing 0.5 ms), runs a second
    kernel while it is in flight, then waits 0.5 ms for the transfer; rank 1 computes 2 ms first."""
    events = (
        (Event(0, "kernel_0", "kernel", 0.0, 1 * MS),
         Event(1, AR, "start", 1 * MS, 3.5 * MS, {"skew": 2 * MS, "pack": 0.5 * MS}),
         Event(2, "kernel_1", "kernel", 3.5 * MS, 4 * MS),
         Event(1, AR, "wait", 4 * MS, 4.5 * MS, {"transfer": 0.5 * MS})),
        (Event(0, "kernel_0", "kernel", 0.0, 2 * MS),
         Event(1, AR, "start", 2 * MS, 3.5 * MS, {"skew": 1 * MS, "pack": 0.5 * MS}),
         Event(2, "kernel_1", "kernel", 3.5 * MS, 4 * MS),
         Event(1, AR, "wait", 4 * MS, 4.5 * MS, {"transfer": 0.5 * MS})),
    )
    steps = (StepTiming("kernel_0", "kernel", 2 * MS),
             StepTiming("all_reduce {'mesh_axes': ['y']}", "collective", 3 * MS, 2 * MS))
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
    assert rank1 == [("kernel_0", "kernel", 0.0, 2000.0), ("all_reduce (start)", "start", 2000.0, 1500.0),
                     ("waiting", "waiting", 2000.0, 1000.0), ("transfer", "transfer", 3000.0, 500.0),
                     ("kernel_1", "kernel", 3500.0, 500.0), ("all_reduce (wait)", "wait", 4000.0, 500.0),
                     ("transfer", "transfer", 4000.0, 500.0)]
    flight = [(e["ph"], e["ts"]) for e in events if e.get("cat") == "in flight" and e["pid"] == 1]
    assert flight == [("b", 3500.0), ("e", 4000.0)]  # the all_reduce overlaps kernel_1
    assert data["otherData"]["ranks"] == 2 and data["displayTimeUnit"] == "ms"


def test_timeline_text_marks_compute_waiting_and_transfer():
    text = timeline_text(two_rank_timings(), width=9, mesh=Mesh(y=2))
    lines = text.splitlines()
    assert lines[0].startswith("timeline of the last run (4.500 ms")
    assert lines[1] == "  rank 0 (y=0) │██░░░░▓█▓│"
    assert lines[2] == "  rank 1 (y=1) │████░░▓█▓│"


@pytest.mark.slow
def test_timeline_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = timeline_png(two_rank_timings(), tmp_path / "timeline.png", mesh=Mesh(y=2))
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert int.from_bytes(data[16:20], "big") > 500


@pytest.mark.slow
def test_timelines_png_stacks_runs_on_one_time_axis(tmp_path):
    pytest.importorskip("matplotlib")
    one = timeline_png(two_rank_timings(), tmp_path / "one.png", mesh=Mesh(y=2)).read_bytes()
    both = timelines_png({"a": two_rank_timings(), "b": two_rank_timings()}, tmp_path / "two.png",
                         mesh=Mesh(y=2)).read_bytes()
    assert both[:8] == b"\x89PNG\r\n\x1a\n"
    assert int.from_bytes(both[20:24], "big") > int.from_bytes(one[20:24], "big")  # taller: two panels
    with pytest.raises(slicer.VizError, match="at least one run"):
        timelines_png({}, tmp_path / "none.png")


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
