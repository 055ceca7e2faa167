"""Seeing the partitioning (layer 12 of docs/architecture.md, between the runtime and the frontends): memory per
device (`memory`), which device holds which block of any value (`block_picture`, `value_lookup`), where a run's time
goes (`timeline`), and the section of `explain()` on context parallelism by heads (`context`). Text needs nothing;
PNG files need matplotlib (`pip install 'slicer[viz]'`), imported only when a PNG is drawn.

    from slicer.viz import memory_report, value_picture, chrome_trace, timeline_png
    print(memory_report(prog.graph, prog.original).text())
    print(value_picture(prog.graph, "w1", prog.original).text())
"""

from __future__ import annotations

from slicer.core import dtypes
from slicer.lowering import KernelGraph

from .block_picture import BlockPicture, device_ranges
from .context import context_lines
from .memory import MemoryReport, memory_report
from .timeline import chrome_trace, timeline_png, timeline_text, timelines_png, write_chrome_trace
from .value_lookup import describe, global_type, resolve, source_names


def value_picture(graph: KernelGraph, what, source: str = "", *, names: dict[str, str] | None = None,
                  grid_dims: tuple[int, ...] | None = None) -> BlockPicture:
    """the block picture of a value of `graph`: `what` is an argument index, "arg1", "result0", a kernel-graph
    name ("%4") or a source name ("w1", with `source` the program's text)."""
    names = source_names(graph, source) if names is None and source else (names or {})
    name = resolve(graph, what, names, source)
    value = graph.values[name]
    dist, note = global_type(graph, name)
    if name in graph.results:  # a result is what the blocks assemble into
        dist, note = graph.result_dists[graph.results.index(name)], ""
    varying: tuple[str, ...] = ()
    if dist is None:
        dist, varying = value.dist, value.varying
    shape = dist.shape  # arguments and results of uneven dims: their logical shape (the type's is padded)
    if name in graph.results:
        shape = graph.result_shape(graph.results.index(name))
    elif name in graph.args:
        shape = graph.arg_shape(graph.args.index(name))
    title = f"{describe(graph, name, names)}: {value.dtype}{list(shape)} as {dist} on mesh {graph.mesh}"
    return BlockPicture(graph.mesh, dist, title=title, notes=(note,) if note else (),
                           dtype_size=_itemsize(value.dtype), grid_dims=grid_dims, varying=varying, shape=shape)


def _itemsize(element_type: str) -> int | None:
    """Bytes per element, or None (no byte counts in the picture) for an element type Slicer does not support."""
    return dtypes.byte_size(element_type)


__all__ = ["MemoryReport", "BlockPicture", "chrome_trace", "context_lines", "describe", "device_ranges", "global_type",
           "memory_report", "resolve", "source_names", "timeline_png", "timeline_text", "timelines_png",
           "value_picture", "write_chrome_trace"]
