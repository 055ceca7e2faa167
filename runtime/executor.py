"""Execute a kernel graph on one MPI rank: its kernels natively, its collectives over MPI.

Each rank holds only its blocks. Kernels are compiled once per process (the JIT
targets this CPU); collectives are the redistribution steps executed by
`slicer.redistribution.mpi_exec.MeshExecutor` on per-axis sub-communicators of a
Cartesian communicator, so the MPI semantics are the ones tested against the
numpy simulator.
"""

from __future__ import annotations

import time

import numpy as np

from slicer.lowering import compile_function
from slicer.lowering.kernel_graph import CollectiveNode, KernelGraph
from slicer.redistribution.mpi_exec import MeshExecutor


class RankExecutor:
    def __init__(self, graph: KernelGraph, comm):
        self.graph = graph
        self.mesh_exec = MeshExecutor(graph.mesh, comm)
        self.rank = self.mesh_exec.rank
        self.coords = np.asarray(graph.mesh.coords(self.rank), dtype=np.int64)
        start = time.perf_counter()
        self.kernels = {n.name: compile_function(graph.kernels_mlir, n.name)
                        for n in graph.nodes if not isinstance(n, CollectiveNode)}
        self.compile_seconds = time.perf_counter() - start

    def run(self, blocks: list[np.ndarray]) -> tuple[list[np.ndarray], list[tuple[str, float]]]:
        """This rank's argument blocks -> (its result blocks, seconds per node)."""
        graph = self.graph
        env = dict(zip(graph.args, blocks))
        for name, block in env.items():
            expected = graph.values[name].local_shape
            if tuple(block.shape) != tuple(expected):
                raise ValueError(f"rank {self.rank}: argument {name} block has shape {block.shape}, expected {expected}")
        timings = []
        for node in graph.nodes:
            start = time.perf_counter()
            if isinstance(node, CollectiveNode):
                before = graph.values[node.input].dist
                env[node.output] = self.mesh_exec.step(node.step, before, env[node.input])
                label = f"{node.op} {node.step.fields()}"
            else:
                args = [env[v] for v in node.inputs] + ([self.coords] if node.needs_coords else [])
                out = self.kernels[node.name](*args)
                for value, array in zip(node.outputs, out if isinstance(out, tuple) else (out,)):
                    env[value] = array
                label = node.name
            timings.append((label, time.perf_counter() - start))
        return [env[v] for v in graph.results], timings
