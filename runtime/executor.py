"""Execute a kernel graph on one MPI rank: its kernels natively, its collectives over MPI.

Each rank holds only its blocks. Kernels come from the on-disk kernel cache
(`slicer.lowering.compile_library`: vectorised, AOT for this CPU, compiled once per
content hash; the launcher warms the cache before starting the ranks), or from
the JIT when the AOT path refuses a kernel (e.g. i1 buffers); collectives are the redistribution steps executed by
`slicer.redistribution.mpi_exec.MeshExecutor` on per-axis sub-communicators of a
Cartesian communicator, so the MPI semantics are the ones tested against the
numpy simulator.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from slicer.core.errors import KernelError
from slicer.lowering import CollectiveNode, KernelGraph, compile_functions, compile_library
from slicer.redistribution.mpi_exec import MeshExecutor

from .memory import BufferTracker

log = logging.getLogger("slicer.runtime")


def load_kernels(graph: KernelGraph) -> tuple[dict, str]:
    """The graph's kernels by name, and where they came from ("aot" or "jit")."""
    names = [n.name for n in graph.nodes if not isinstance(n, CollectiveNode)]
    if not names:
        return {}, "aot"
    try:
        library = compile_library(graph.kernels_mlir)
        return {name: library[name] for name in names}, "aot"
    except KernelError as exc:
        log.warning("AOT kernel compilation refused (%s); using the JIT", str(exc).splitlines()[0])
        return compile_functions(graph.kernels_mlir, names), "jit"


class RankExecutor:
    """One rank's part of a kernel graph: its kernels loaded, its collectives on `comm`'s sub-communicators."""

    def __init__(self, graph: KernelGraph, comm):
        self.graph = graph
        self.comm = comm
        self.mesh_exec = MeshExecutor(graph.mesh, comm)
        self.rank = self.mesh_exec.rank
        self.coords = np.asarray(graph.mesh.coords(self.rank), dtype=np.int64)
        start = time.perf_counter()
        self.kernels, self.backend = load_kernels(graph)
        self.compile_seconds = time.perf_counter() - start
        self.buffers = BufferTracker(graph)  # drops values after their last use; .peak: bytes held at most

    def run(self, blocks: list[np.ndarray], *, timed: bool = False) -> tuple[list[np.ndarray], list[tuple]]:
        """This rank's argument blocks -> (its result blocks, one event per node: (label, kind, start, wait_end,
        end) in `time.perf_counter()` seconds). With `timed`, every collective first waits at a barrier of the
        whole job, so its event separates waiting for the other ranks (start..wait_end) from the transfer."""
        graph = self.graph
        env = dict(zip(graph.args, blocks))
        for name, block in env.items():
            expected = graph.values[name].local_shape
            if tuple(block.shape) != tuple(expected):
                raise ValueError(f"rank {self.rank}: argument {name} block has shape {block.shape}, expected {expected}")
        events = []
        self.buffers.start(env)
        for index, node in enumerate(graph.nodes):
            start = time.perf_counter()
            if isinstance(node, CollectiveNode):
                if timed:
                    self.comm.Barrier()
                waited = time.perf_counter()
                before = graph.values[node.input].dist
                env[node.output] = self.mesh_exec.step(node.step, before, env[node.input])
                events.append((f"{node.op} {node.step.fields()}", "collective", start, waited, time.perf_counter()))
            else:
                args = [np.require(env[v], requirements="C") for v in node.inputs] + ([self.coords] if node.needs_coords else [])
                out = self.kernels[node.name](*args)
                for value, array in zip(node.outputs, out if isinstance(out, tuple) else (out,)):
                    env[value] = array
                events.append((node.name, "kernel", start, start, time.perf_counter()))
            self.buffers.step(index, env)
        return [env[v] for v in graph.results], events
