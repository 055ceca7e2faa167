"""Execute a kernel graph on one MPI rank: its kernels natively, its collectives over MPI, overlapped.

Each rank holds only its blocks. Kernels come from the on-disk kernel cache
(`slicer.lowering.compile_kernels`: vectorised, AOT for this CPU, each kernel compiled once per
content hash), or from the JIT when the AOT path refuses a kernel (e.g. i1 buffers). The launcher compiles them
before starting the ranks and tells them where each one is (`kernel_sources`): a rank then only loads shared
objects (`kernels_from_sources`), without importing the MLIR bindings or the kernel pipeline, which
`slicer.lowering` loads when `compile_kernels` or the JIT is first read; collectives are the redistribution steps
executed by `slicer.runtime.collectives.plan_executor` on per-axis sub-communicators of a Cartesian communicator, so
the MPI semantics are the ones tested against the numpy simulator.

Details: docs/module-notes.md, `runtime/execution/executor.py`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np

from slicer import lowering
from slicer.core import environment
from slicer.core.errors import InputError, KernelAssertionError, KernelError, OptionError
from slicer.lowering import CollectiveNode, KernelCache, KernelGraph, KernelLibrary

from ..collectives import shm_collectives
from ..collectives.plan_executor import MeshExecutor, Pending, StepRunner
from .buffer_tracker import BufferTracker
from .timings import Event

log = logging.getLogger("slicer.runtime")

KERNEL, START, WAIT = "kernel", "start", "wait"
JIT = "jit"


def load_kernels(graph: KernelGraph) -> tuple[dict, str]:
    """The graph's kernels by name, and where they came from ("aot" or "jit")."""
    names = [n.name for n in graph.nodes if not isinstance(n, CollectiveNode)]
    if not names:
        return {}, "aot"
    try:
        # one cache entry per distinct kernel (repeated blocks: once)
        kernels = lowering.compile_kernels(graph.kernels_mlir, pipeline=kernel_pipeline(graph))
        return {name: kernels[name] for name in names}, "aot"
    except KernelError as exc:
        log.warning("AOT kernel compilation refused; using the JIT. The cause:\n%s", refusal_cause(exc))
        return _jit_kernels(graph), JIT


def kernel_pipeline(graph: KernelGraph) -> lowering.KernelPipeline:
    """The kernel pipeline `graph` asks for: the default one, with the bf16 contractions' units if it forces them
    (`KernelGraph.bf16_units`)."""
    if graph.bf16_units == "auto":
        return lowering.DEFAULT_PIPELINE
    return lowering.DEFAULT_PIPELINE.with_options("slicer-kernel-contract", bf16_units=graph.bf16_units)


#: The longest line of a refusal's cause kept whole ("see current operation" notes can print a whole kernel).
CAUSE_LINE = 500


def refusal_cause(exc: KernelError) -> str:
    """Every line of why the AOT path refused (the pass pipeline's diagnostics and notes, which the MLIR error
    carries after its first line "Failure while executing pass pipeline:"), indented, each cut at
    `CAUSE_LINE` characters."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return "\n".join(f"  {line if len(line) <= CAUSE_LINE else line[:CAUSE_LINE] + ' ...'}" for line in lines)


def _jit_kernels(graph: KernelGraph) -> dict:
    names = [n.name for n in graph.nodes if not isinstance(n, CollectiveNode)]
    return lowering.compile_functions(graph.kernels_mlir, names)


def kernel_sources(kernels: dict, backend: str) -> dict:
    """Where the kernels `load_kernels` returned come from, as JSON for the ranks: "jit" (the AOT path refused
    them: each rank compiles them itself), or each kernel's cache entry (cache root and key) and its name in
    that entry's library."""
    if backend == JIT:
        return {"backend": JIT}
    return {"backend": backend,
            "kernels": {name: {"cache": str(k.library.path.parent.parent), "key": k.library.key, "kernel": k.name}
                        for name, k in kernels.items()}}


def kernels_from_sources(graph: KernelGraph, sources: dict) -> tuple[dict, str]:
    """The kernels of `graph` by name as `kernel_sources` describes them, and their backend: the cache entries
    loaded (each library once; KernelError if an entry is missing or no longer valid), or the JIT's."""
    if sources["backend"] == JIT:
        return _jit_kernels(graph), JIT
    libraries: dict[str, KernelLibrary] = {}
    kernels = {}
    for name, source in sources["kernels"].items():
        key = source["key"]
        if key not in libraries:
            entry = KernelCache(source["cache"]).load(key)
            libraries[key] = KernelLibrary(entry.library, entry.meta, cache_hit=True, compile_seconds=0.0)
        kernels[name] = libraries[key][source["kernel"]]
    return kernels, sources["backend"]


def _contiguous(array: np.ndarray) -> np.ndarray:
    """`array` when C-contiguous (almost always: kernels and collectives write fresh contiguous blocks), else
    a contiguous copy; cheaper than `np.require` on the hot path."""
    return array if array.flags.c_contiguous else np.ascontiguousarray(array)


@dataclass(frozen=True)
class Action:
    """One entry of a schedule: run kernel node `node`, start collective node `node`, or wait for it."""

    kind: str
    node: int


def schedule(graph: KernelGraph, overlap: bool = True) -> tuple[Action, ...]:
    """The order in which a rank runs the nodes of `graph`.

    With `overlap`, a collective starts as soon as its input exists and the rank is about to run the last kernel
    before the collective's place in the graph (several in program order), and is waited for just before the first
    node using its output (a kernel, or a collective whose input it is), or at the end for results. So it overlaps
    the kernel before it and any after it up to its first reader: as PyTorch FSDP prefetches one layer's all_gather,
    not every layer's at the start, a rank holds the collectives in flight of about one kernel, not of the whole
    program (an argument's all_gather started at the beginning held its block, and its shared memory, for the
    whole run). Without, every collective is started and waited for at its place in program order."""
    nodes = graph.nodes
    actions: list[Action] = []
    if not overlap:
        for index, node in enumerate(nodes):
            if isinstance(node, CollectiveNode):
                actions += [Action(START, index), Action(WAIT, index)]
            else:
                actions.append(Action(KERNEL, index))
        return tuple(actions)
    kernels, gate, last = [], {}, -1  # gate: per collective, the last kernel before it (-1: none)
    for index, node in enumerate(nodes):
        if isinstance(node, CollectiveNode):
            gate[index] = last
        else:
            kernels.append(index)
            last = index
    ready = set(graph.args)
    started: set[int] = set()
    pending: list[int] = []  # started, not waited for, in start order
    upcoming = iter(kernels + [len(nodes)])
    reached = next(upcoming)  # the next kernel to run

    def start_ready() -> None:
        for index, limit in gate.items():
            if index not in started and limit <= reached and nodes[index].input in ready:
                started.add(index)
                pending.append(index)
                actions.append(Action(START, index))

    def wait_for(values) -> None:
        for index in sorted(i for i in pending if nodes[i].output in values):
            pending.remove(index)
            actions.append(Action(WAIT, index))
            ready.add(nodes[index].output)

    start_ready()
    for index, node in enumerate(nodes):
        if isinstance(node, CollectiveNode):
            if index not in started:  # its input is the output of a collective still in flight
                wait_for({node.input})
                start_ready()
            continue
        wait_for(set(node.inputs))
        actions.append(Action(KERNEL, index))
        ready.update(node.outputs)
        reached = next(upcoming)
        start_ready()
    wait_for({nodes[i].output for i in pending})
    return tuple(actions)


@dataclass(frozen=True)
class RunOptions:
    """How ranks run a program's collectives: `collectives` "auto", "mpi" or "shm" (`MeshExecutor`'s strategy),
    `overlap`: collectives overlap kernels (else each is waited for where it stands). Arguments of a run or a
    session (`Program.run(..., collectives=, overlap=)`), sent to the ranks with the program."""

    collectives: str = "auto"
    overlap: bool = True

    @staticmethod
    def chosen(collectives: str | None = None, overlap: bool | None = None) -> RunOptions:
        """The options given, each one not given (None) from its default in the environment
        (`SLICER_COLLECTIVES`, `SLICER_OVERLAP`); `OptionError` for a value that means nothing."""
        if overlap is None:
            overlap = overlap_word(environment.value(environment.OVERLAP) or "1", f"{environment.OVERLAP.name}=")
        elif not isinstance(overlap, bool):
            raise OptionError(f"overlap={overlap!r}: True (collectives overlap kernels) or False")
        return RunOptions(shm_collectives.wanted(collectives), overlap)


_OVERLAP_WORDS = {"1": True, "on": True, "true": True, "yes": True, "0": False, "off": False, "false": False,
                  "no": False}


def overlap_word(text: str, where: str = "--overlap ") -> bool:
    """`overlap` written as a word (`SLICER_OVERLAP`, `slicer-run --overlap off`): on (collectives overlap
    kernels) or off; OptionError naming `where` else."""
    value = _OVERLAP_WORDS.get(text.strip().lower())
    if value is None:
        raise OptionError(f"{where}{text.strip().lower()!r}: 1 (collectives overlap kernels) or 0 (each waited for "
                          "where it stands)")
    return value


class RankExecutor:
    """One rank's part of a kernel graph: its kernels loaded, its collectives on `comm`'s sub-communicators."""

    def __init__(self, graph: KernelGraph, comm, *, options: RunOptions | None = None,
                 kernel_sources: dict | None = None):
        """`options`: how collectives run (None: the environment's defaults, `RunOptions.chosen`);
        `kernel_sources`: where the launcher found the kernels (`kernel_sources`); None: load or compile them
        here (`load_kernels`)."""
        options = options if options is not None else RunOptions.chosen()
        self.graph = graph
        self.comm = comm
        self.mesh_exec = MeshExecutor(graph.mesh, comm, strategy=options.collectives)
        self.rank = self.mesh_exec.rank
        self.coords = np.asarray(graph.mesh.coords(self.rank), dtype=np.int64)
        start = time.perf_counter()
        if kernel_sources is None:
            self.kernels, self.backend = load_kernels(graph)
        else:
            self.kernels, self.backend = kernels_from_sources(graph, kernel_sources)
        self.compile_seconds = time.perf_counter() - start
        self.buffers = BufferTracker(graph)  # drops values after their last use; .peak: bytes held at most
        self.actions = schedule(graph, options.overlap)
        # Each collective node has its own program (its packing buffers; shared-memory segments shared with the
        # collectives never in flight at the same time by the schedule), but no output block of its own: every
        # run's output is a new block, dropped after its last use like a kernel's, so a rank holds a gathered
        # weight only while the kernel graph says (FSDP), not from one run to the next (glibc hands the freed
        # block to the next allocation of its size: `heap.keep_freed_memory`).
        spans: dict[int, list[int]] = {}
        for position, action in enumerate(self.actions):
            if action.kind != KERNEL:
                spans.setdefault(action.node, []).append(position)
        indices = [i for i, node in enumerate(graph.nodes) if isinstance(node, CollectiveNode)]
        steps = [(graph.nodes[i].step, graph.values[graph.nodes[i].input].local_shape,
                  graph.values[graph.nodes[i].input].numpy_dtype) for i in indices]
        programs = self.mesh_exec.pooled_programs(steps, [(spans[i][0], spans[i][1]) for i in indices])  # start, wait
        self.programs: dict[int, StepRunner] = dict(zip(indices, programs))
        self.labels = {index: (f"{node.op} {node.step.fields()}" if isinstance(node, CollectiveNode) else node.name)
                       for index, node in enumerate(graph.nodes)}
        self.failed: tuple[int, KernelAssertionError] | None = None  # the last run's first failed check: (node, error)

    def close(self) -> None:
        """Free the collectives' shared memory and communicators (collective: every rank calls it)."""
        self.mesh_exec.close()

    def run(self, blocks: list[np.ndarray], *, timed: bool = False) -> tuple[list[np.ndarray], list[Event]]:
        """This rank's argument blocks -> (its result blocks, its timeline: one `Event` per action, in
        `time.perf_counter()` seconds). With `timed`, every collective starts after a barrier of the whole job,
        which separates waiting for the other ranks (the event's "skew") from the transfer. A failed check
        raises at the end of the run (see the module docstring)."""
        graph = self.graph
        self.failed = None
        env = dict(zip(graph.args, blocks))
        for name, block in env.items():
            expected = graph.values[name].local_shape
            if tuple(block.shape) != tuple(expected):
                raise InputError(
                    f"rank {self.rank}: argument {name} block has shape {block.shape}, expected {expected}"
                )
        events = []
        self.buffers.start(env)
        in_flight: dict[int, Pending] = {}
        progressed: dict[int, Pending] = {}  # those that advance when asked (`Pending.progresses`)
        nodes, labels, perf = graph.nodes, self.labels, time.perf_counter
        for action in self.actions:
            index = action.node
            node = nodes[index]
            start = perf()
            if action.kind == KERNEL:
                args = [_contiguous(env[v]) for v in node.inputs]
                if node.needs_coords:
                    args.append(self.coords)
                kernel = self.kernels[node.name]
                try:
                    out = kernel(*args)
                except KernelAssertionError as exc:  # finish the step: the other ranks wait for our collectives
                    if getattr(exc, "outputs", None) is None:
                        raise
                    out, self.failed = exc.outputs, self.failed or (index, exc)
                for value, array in zip(node.outputs, out if isinstance(out, tuple) else (out,)):
                    env[value] = array
                end = perf()
                if progressed:  # let MPI progress the collectives in flight
                    for pending in progressed.values():
                        pending.test()
                events.append(Event(index, labels[index], KERNEL, start, end))
                self.buffers.step(index, env, getattr(kernel, "addresses", None))
            elif action.kind == START:
                if timed:
                    self.comm.Barrier()
                waited = perf()
                program = self.programs[index]
                pending = in_flight[index] = program.start(_contiguous(env[node.input]))
                if pending.progresses:
                    progressed[index] = pending
                end = perf()
                parts = {"skew": waited - start, "pack": end - waited} if timed else {"pack": end - waited}
                events.append(Event(index, labels[index], START, start, end, parts))
            else:
                pending = in_flight.pop(index)
                progressed.pop(index, None)
                env[node.output] = pending.wait()
                events.append(Event(index, labels[index], WAIT, start, perf(),
                                    {"transfer": pending.phases.transfer, "unpack": pending.phases.unpack}))
                # A collective's input is released only once it completed: the transfer may read it until then.
                self.buffers.step(index, env)
        if self.failed is not None:
            raise self.failed[1]
        return [env[v] for v in graph.results], events
