"""Memory per device: what each device holds of the arguments and results, its peak during the run, and the
same figures for the unpartitioned program.

The estimate is the kernel graph's liveness (`KernelGraph.live_bytes_per_node`: a value lives from the node
producing it to its last use, a node's inputs and outputs together) plus the scratch buffers the MPI executor
of collectives allocates besides its input and output block (`slicer.runtime.collectives.collective_kinds`, the sizes
its buffers are made with): a step along a dim that is not the block's leading one packs its chunks (a
`reduce_scatter` its input, an `all_gather` what it receives), and half-precision reductions widen to f32 (MPI
has no portable f16 or bf16 sum; `dtypes.accumulation_dtype`). Scratch inside kernels and inside MPI is not counted.
The unpartitioned program is counted the same way (`unpartitioned_peak`): the same nodes and liveness, every
value whole and a collective's output the same value as its input, so both figures include what is held between
kernels (a training step's activations and gradients), not only arguments and results. After a run, `Timings.peak_bytes`
is what each rank's executor measured of the same buffers (`slicer.runtime.execution.buffer_tracker`).

Every device holds blocks of the same sizes: one figure per device. A dim that does not divide its tiles is
cut into padded blocks (docs/partition.md, "Uneven shapes"): every device holds a block of ceil(n/k) rows, the
padding included (what it really allocates), while the unpartitioned figures count the logical arrays; the
arguments and results say each device's valid rows. (A `permute` that leaves a device's block in place holds one block
there, not two; the estimate counts two.)
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from slicer.lowering import CollectiveNode, KernelGraph
from slicer.runtime.collectives.collective_kinds import mpi_scratch_bytes
from slicer.runtime.execution.timings import Timings
from slicer.runtime.jobs.resources import human_bytes

from .block_picture import uneven_dims
from .remat_memory import RematReport
from .value_lookup import describe, source_names


@dataclass(frozen=True)
class ValueBytes:
    """One argument or result: what to call it, and its bytes per device and whole."""

    label: str
    type: str  # f32[16, 32] as [[],[y]]
    bytes_per_device: int
    global_bytes: int


ROLE_TITLES = {"input": "batch", "parameter": "parameters", "buffer": "buffers", "state": "optimizer state",
               "hyper": "hyperparameters"}


@dataclass(frozen=True)
class MemoryReport:
    """Bytes per device of a compiled program (see the module docstring); `measured`: per rank, after a run."""

    devices: int
    arguments: tuple[ValueBytes, ...]
    results: tuple[ValueBytes, ...]
    timeline: tuple[tuple[str, int], ...]  # ("arguments", bytes), then (node label, bytes during it)
    peak: int
    peak_when: str
    unpartitioned_peak: int
    measured: tuple[int, ...] = ()
    roles: tuple[str, ...] = ()  # per argument, when the program says (an imported training step)
    remat: RematReport | None = None  # what rematerialisation saved and recomputed, when the program has it
    experts: tuple[str, ...] = ()  # per stacked expert weight: the experts each device holds (slicer.viz.experts)

    @property
    def argument_bytes(self) -> int:
        return sum(b.bytes_per_device for b in self.arguments)

    @property
    def result_bytes(self) -> int:
        return sum(b.bytes_per_device for b in self.results)

    @property
    def unpartitioned_argument_bytes(self) -> int:
        return sum(b.global_bytes for b in self.arguments)

    @property
    def unpartitioned_result_bytes(self) -> int:
        return sum(b.global_bytes for b in self.results)

    def with_measured(self, timings: Timings | None) -> MemoryReport:
        peaks = tuple(timings.peak_bytes) if timings is not None else ()
        return replace(self, measured=peaks)

    def by_role(self) -> dict[str, tuple[int, int]]:
        """What a training step holds, per device and unpartitioned: its arguments by role (parameters, buffers,
        optimizer state, the batch), and what it computes ("activations and gradients": the peak less the
        arguments, the values made during the step and held at its peak, new parameters and state
        included). Empty when the arguments have no roles."""
        if len(self.roles) != len(self.arguments):
            return {}
        out: dict[str, tuple[int, int]] = {}
        for role, block in zip(self.roles, self.arguments):
            mine, whole = out.get(ROLE_TITLES.get(role, role), (0, 0))
            out[ROLE_TITLES.get(role, role)] = (mine + block.bytes_per_device, whole + block.global_bytes)
        out["activations and gradients"] = (max(self.peak - self.argument_bytes, 0),
                                            max(self.unpartitioned_peak - self.unpartitioned_argument_bytes, 0))
        return out

    def text(self) -> str:
        lines = [f"memory per device ({self.devices} devices, each holding blocks of the same sizes; "
                 "unpartitioned: the whole program on one device):"]
        width = max((len(b.label) for b in self.arguments + self.results), default=0)
        type_width = max((len(b.type) for b in self.arguments + self.results), default=0)
        for title, blocks, total, whole in (("arguments", self.arguments, self.argument_bytes,
                                             self.unpartitioned_argument_bytes),
                                            ("results", self.results, self.result_bytes,
                                             self.unpartitioned_result_bytes)):
            lines.append(f"  {title + ':':<11}{_size(total):>20}   unpartitioned {_size(whole)}{_ratio(whole, total)}")
            for b in blocks:
                lines.append(f"    {b.label:<{width}}  {b.type:<{type_width}}  {_size(b.bytes_per_device):>20} of "
                             f"{_size(b.global_bytes)}{_fraction(b.global_bytes, b.bytes_per_device)}")
        lines.append(f"  {'peak:':<11}{_size(self.peak):>20}   {self.peak_when}; unpartitioned "
                     f"{_size(self.unpartitioned_peak)}{_ratio(self.unpartitioned_peak, self.peak)}")
        lines.append("    live blocks: " + ", ".join(f"{when} {_short(b)}" for when, b in self.timeline))
        roles = self.by_role()
        if roles:
            lines.append("  by role (per device; unpartitioned):")
            for title, (mine, whole) in roles.items():
                lines.append(f"    {title + ':':<27}{_size(mine):>20}   unpartitioned "
                             f"{_size(whole)}{_ratio(whole, mine)}")
        lines += [f"  experts per device: {line}" for line in self.experts]
        if self.remat is not None:
            lines.append(self.remat.text())
        if self.measured:
            lines.append(f"  {'measured:':<11}{_size(max(self.measured)):>20}   {self.measured_text()}")
        return "\n".join(lines)

    def measured_text(self) -> str:
        """The ranks' measured peak next to the estimate (one line; needs `measured`)."""
        if not self.measured:
            return "no run measured (give the Timings of an MPI run)"
        low, high = min(self.measured), max(self.measured)
        where = f"{_size(high)} on every rank" if low == high else f"{_size(low)} to {_size(high)} over the ranks"
        return (f"the most the ranks' executors held at once: {where} ({_vs(high, self.peak)}: {_size(self.peak)} "
                f"{self.peak_when})")


def _size(count: int) -> str:
    return f"{count} B" if count < 1024 else f"{human_bytes(count)} ({count} B)"


def _short(count: int) -> str:
    return f"{count} B" if count < 10 * 1024 else human_bytes(count)


def _ratio(whole: int, part: int) -> str:
    return f": {whole / part:.2f}x as much" if part and whole != part else ""


def _fraction(whole: int, part: int) -> str:
    return f" (1/{whole // part})" if part and whole != part and whole % part == 0 else ""


def _vs(measured: int, estimate: int) -> str:
    if measured == estimate:
        return "as estimated"
    return f"{'+' if measured > estimate else '-'}{_size(abs(measured - estimate))} vs the estimate"


def collective_scratch_bytes(graph: KernelGraph, node: CollectiveNode) -> int:
    """Bytes the MPI executor allocates for `node` besides its input and output block (module docstring): its
    kind's packing (`slicer.runtime.collectives.collective_kinds`)."""
    value = graph.values[node.input]
    return mpi_scratch_bytes(node.step, graph.mesh, value.local_shape, value.numpy_dtype)


def unpartitioned_peak(graph: KernelGraph) -> int:
    """The peak of the unpartitioned program counted as the partitioned one is: the same liveness over the same
    nodes (values live from their kernel to their last use, results to the end), each value whole, and a
    collective's output the same value as its input (nothing moves on one device). So both figures count the
    values held between kernels (a training step's activations kept for the backward pass, its gradients), not
    only the arguments and results; inside kernels neither counts scratch.

    A value's whole size: its global shape (`dist.shape`), times the devices of its loop axes (`varying`: each
    holds another member of the family, e.g. another head's block) unless it is a partial sum or the input of a
    reduction (its members are terms of one value)."""
    identity: dict[str, str] = {}
    reduced: set[str] = set()
    for node in graph.nodes:
        if isinstance(node, CollectiveNode):
            identity[node.output] = identity.get(node.input, node.input)
            if node.step.reduces:
                reduced.add(node.input)

    logical = {name: graph.arg_shape(i) for i, name in enumerate(graph.args)}
    logical.update({name: graph.result_shape(i) for i, name in enumerate(graph.results)})

    def whole(name: str) -> int:  # arguments and results: their logical shapes (a type's may be padded)
        value = graph.values[name]
        count = int(np.prod(logical.get(name, value.dist.shape), dtype=np.int64)) * value.numpy_dtype.itemsize
        if value.varying and not value.dist.partial and name not in reduced:
            count *= int(np.prod([graph.mesh.size(a) for a in value.varying], dtype=np.int64))
        return count

    size: dict[str, int] = {}
    for name in graph.values:
        key = identity.get(name, name)
        size[key] = max(size.get(key, 0), whole(name))
    last_use: dict[str, int] = {}
    for name, index in graph.last_uses().items():
        key = identity.get(name, name)
        last_use[key] = max(last_use.get(key, index), index)
    live = {identity.get(n, n): size[identity.get(n, n)] for n in graph.args}
    peak = sum(live.values())
    for index, node in enumerate(graph.nodes):
        if not isinstance(node, CollectiveNode):
            for name in node.outputs:
                live[identity.get(name, name)] = size[identity.get(name, name)]
            peak = max(peak, sum(live.values()))
        for key in [k for k in live if last_use.get(k, -1) <= index]:
            del live[key]
    return peak


def _type(graph: KernelGraph, name: str, dist=None, shape=None) -> str:
    v = graph.values[name]
    dist = dist or v.dist
    shape = dist.shape if shape is None else shape
    uneven = uneven_dims(graph.mesh, dist, shape)
    return f"{v.dtype}{list(shape)} as {dist}" + (f" ({'; '.join(uneven)})" if uneven else "")


def memory_report(graph: KernelGraph, source: str = "", timings: Timings | None = None,
                  roles: tuple[str, ...] = (), names: dict[str, str] | None = None) -> MemoryReport:
    """The memory figures of `graph` (`source`: the program's text, for the values' names, or `names` as
    `value_lookup.source_names` gives them; `roles`: what each argument is, for `MemoryReport.by_role`)."""
    names = names if names is not None else source_names(graph, source)
    itemsize = {name: v.numpy_dtype.itemsize for name, v in graph.values.items()}

    def whole(name: str, shape) -> int:
        return int(np.prod(shape, dtype=np.int64)) * itemsize[name]

    arguments = tuple(ValueBytes(str(describe(graph, name, names)), _type(graph, name, shape=graph.arg_shape(i)),
                            graph.value_bytes(name), whole(name, graph.arg_shape(i)))
                      for i, name in enumerate(graph.args))
    results = tuple(ValueBytes(str(describe(graph, name, names)), _type(graph, name, dist, graph.result_shape(i)),
                          graph.value_bytes(name), whole(name, graph.result_shape(i)))
                    for i, (name, dist) in enumerate(zip(graph.results, graph.result_dists)))
    timeline = list(graph.live_bytes_per_node())
    for index, node in enumerate(graph.nodes):
        if isinstance(node, CollectiveNode):
            label, live = f"{node.op} {node.input}->{node.output}", timeline[index + 1][1]
            extra = collective_scratch_bytes(graph, node)
            timeline[index + 1] = (f"{label} (+{_size(extra)} scratch)" if extra else label, live + extra)
    at = max(range(len(timeline)), key=lambda i: (timeline[i][1], -i))
    when = "at the start (arguments)" if at == 0 else f"during {timeline[at][0]}"
    unpartitioned = unpartitioned_peak(graph)
    return MemoryReport(graph.mesh.device_count, arguments, results, tuple(timeline), timeline[at][1], when,
                        unpartitioned, roles=tuple(roles)).with_measured(timings)
