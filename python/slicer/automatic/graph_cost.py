"""What a compiled program costs: its kernel graph (`slicer.lowering.KernelGraph`) priced with the figures the
search's model uses (`cost_model.Machine`, the collectives' `CostModel`), so the two agree where the model's
picture of propagation and partitioning is right, and the compiled program decides where it is not.

Each kernel: a call (`Machine.kernel_seconds`), each array it takes or returns (`Machine.array_seconds`), and each
of its ops (`Machine.op_time`: the op's FLOPs and the bytes it reads and stores, from the kernel's own IR,
`sketch.read_kernels`, so backward kernels, fused generic ops and the optimizer count as compiled). Each
collective: the alpha/beta time of the step it performs (its busiest device's bytes, `redistribution.steps`) over
its axes, started when its input exists and the link is free, waited for where its output is first read (up to
`Machine.overlap` of the transfer hidden by the kernels in between); the other ranks post it up to
`Machine.sync_seconds` later (hidden when it is posted long before it is needed, as a prefetched all_gather is) and
the rank's own work on it (`Machine.collective_seconds`) is never hidden (`cost_model.wait_for`). Peak memory:
`KernelGraph.peak_bytes_per_device`, exactly what the compiled program holds by the graph's count.
"""

from __future__ import annotations

from slicer.lowering.kernel_graph import CollectiveNode, KernelGraph
from slicer.redistribution import subaxes

from .cache_reads import CacheClock
from .cost_model import Estimate, ModelledCollective, moved_reads, op_seconds
from .machine import Machine
from .sketch import FREE_OPS, Sketch, read_kernels


def price_graph(graph: KernelGraph, machine: Machine, comm, kernels: dict | None = None,
                peak: int | None = None) -> Estimate:
    """The estimate of running `graph` once: compute, communication exposed and overlapped, its collectives and
    its peak bytes per device. `kernels` and `peak`: the graph's `graph_kernels` and peak bytes, when known already
    (a calibration prices the same graphs with many sets of figures: counting the peak every time was 40% of its
    fit)."""
    kernels = graph_kernels(graph) if kernels is None else kernels
    collectives: list[ModelledCollective] = []
    est = Estimate(collectives=collectives)
    clock = link = 0.0
    gate = 0.0  # when the rank is about to run the last kernel so far: a collective starts no earlier (`schedule`)
    ready: dict[str, float] = {}
    pending: dict[str, tuple[float, float]] = {}  # collective output -> (transfer done, transfer seconds)
    cache = CacheClock.of(machine, sum(graph.value_bytes(name) for name in graph.args))

    def wait(names) -> None:
        nonlocal clock
        for name in names:
            found = pending.pop(name, None)
            if found is not None:
                exposed = max(found[0] - clock, (1 - machine.overlap) * found[1], 0.0)
                est.exposed += exposed
                est.overlapped += max(0.0, found[1] + machine.sync_seconds - exposed)
                clock += exposed

    for node in graph.nodes:
        if isinstance(node, CollectiveNode):
            seconds, busiest, axes = collective_seconds(graph, node, comm)
            if seconds <= 0:
                ready[node.output] = ready.get(node.input, 0.0)
                continue
            # posted when its input exists, at most one kernel ahead of its place
            # (`runtime.execution.executor.schedule`); the other ranks up to `sync_seconds` later (see
            # cost_model.wait_for)
            start = max(max(ready.get(node.input, 0.0), gate) + machine.sync_seconds, link)
            link = start + seconds
            pending[node.output] = (link, seconds)
            ready[node.output] = link
            clock += machine.collective_seconds
            est.exposed += machine.collective_seconds
            if cache is not None:
                cache.made(node.output, graph.value_bytes(node.output))
            where = graph.values[node.output].loc or graph.values[node.input].loc
            extra = machine.sync_seconds + machine.collective_seconds
            collectives.append(ModelledCollective(node.op, axes, busiest, seconds + extra, where))
            continue
        gate = clock
        wait(node.inputs)
        seconds = kernel_seconds(kernels.get(node.name), machine, cache, node)
        est.compute += seconds
        clock += seconds
        for name in node.outputs:
            ready[name] = clock
    wait(graph.results)
    est.compute += machine.run_seconds
    est.peak_bytes = int(graph.peak_bytes_per_device()[0] if peak is None else peak)
    return est


def graph_kernels(graph: KernelGraph) -> dict[str, Sketch]:
    """Each kernel of `graph` read as the model reads a program (`sketch.read_kernels`), by name."""
    return read_kernels(graph.kernels_mlir) if graph.kernels_mlir else {}


def collective_seconds(graph: KernelGraph, node: CollectiveNode, comm) -> tuple[float, int, tuple[str, ...]]:
    """(alpha/beta seconds, busiest device's bytes, axes) of one collective of `graph`."""
    step = node.step
    axes = tuple(getattr(step, "mesh_axes", ()) or ())
    if not axes:
        return 0.0, 0, axes
    # a plan's collective may run over part of an axis (y:(2)2, the minor half of y: redistribution/subaxes.py)
    busiest = type(step).busiest(subaxes.group_size(graph.mesh, axes), graph.value_bytes(node.input))
    return (comm.seconds(axes, busiest) if busiest else 0.0), busiest, axes


def kernel_seconds(kernel: Sketch | None, machine: Machine, cache: CacheClock | None = None, node=None) -> float:
    """One kernel's call, the arrays it takes and returns, and its ops, priced as the search's model prices the
    program's ops. `cache`: the run's cache clock, which tells the reads from memory (`cache_reads.py`), and `node`
    the graph's call (its input and output values, the arrays); without them, a kernel alone with its arguments in
    cache."""
    seconds = machine.kernel_seconds
    if node is not None:
        seconds += machine.array_seconds * (len(node.inputs) + len(node.outputs))
    if kernel is None:
        return seconds
    cache = cache or CacheClock.of(machine, 0)  # None: its reads are priced alike, whatever their distance
    inputs, outputs = (node.inputs, node.outputs) if node is not None else ((), ())
    tag = object() if node is None else node.name

    def key(v: int):  # a kernel argument is a value of the graph; the others are the kernel's own
        if v < kernel.num_args:
            return inputs[v] if v < len(inputs) else (tag, v)
        return (tag, v)

    cheap = {v for op in kernel.ops if op.cheap for v in op.results}  # made in place, never read from memory
    for op in kernel.ops:
        if op.name in FREE_OPS:  # read in place (a view, a slice): its result stands for the operand's bytes
            if cache is not None and op.operands and op.operands[0] >= 0:
                for v in op.results:
                    if v >= 0:
                        cache.share(key(v), key(op.operands[0]))
            continue
        produced = sum(kernel.nbytes(v) for v in op.results if v >= 0)
        read = [kernel.nbytes(v) if v >= 0 and v not in cheap else 0 for v in op.operands]
        cold = 0
        if cache is not None:
            keys = [key(v) if v >= 0 else None for v in op.operands]
            cold = cache.read(keys, moved_reads(op, read))
            for v in op.results:
                if v >= 0 and not op.cheap:
                    cache.made(key(v), kernel.nbytes(v))
        seconds += op_seconds(machine, op, 1, produced, read, cold) or 0.0
    if cache is not None:
        for v, name in zip(kernel.results, outputs):  # what later kernels read
            if v >= 0:
                cache.share(name, key(v))
    return seconds
