"""In-process SPMD simulator: run a partitioned function for every device of the mesh in one process.

The test oracle of `slicer-partition` and a debugging mode of the MPI runtime. The SPMD function is cut into
a kernel graph (`slicer.lowering.kernel_graph`, the same graph the MPI runtime executes): its kernels are
compiled once, by the JIT as scalar loops (the reference) or as the native kernels the ranks load, and each
is called once per device with that device's coordinate; each collective runs in numpy on the list of device
blocks with the step semantics of `slicer.redistribution.numpy_semantics.run_step`
(the reference that also checks the synthesizer's plans and the MPI executor). Inputs are laid out from
global arrays with the arguments' distributed types; results are assembled from the results' types
(checking that all replicas of a block agree, and summing partial results).

    program = Simulator(partitioned_module)          # compiles the kernels
    outputs = program(*global_inputs)                  # numpy in, numpy out (tuple for several results)
"""

from __future__ import annotations

import numpy as np

from slicer import lowering
from slicer.core import dtypes
from slicer.core.errors import KernelGraphError, SimulationError
from slicer.lowering import CollectiveNode, KernelGraph
from slicer.redistribution import DistType, subaxes
from slicer.redistribution.layout import Layout
from slicer.redistribution.numpy_semantics import block_slices, groups, initial_blocks, run_step

from ..execution.blocks import pad_global
from ..execution.executor import load_kernels


class Simulator:
    """A partitioned function, its kernels compiled, callable on global numpy arrays."""

    def __init__(self, module, entry: str | None = None, *, backend: str = "jit"):
        """`backend`: "jit" runs the kernels as the JIT's scalar loops (the reference: a tile-only partition
        is then bit-identical to the unpartitioned program), "native" the kernels the MPI ranks load."""
        try:
            self.graph = module if isinstance(module, KernelGraph) else lowering.build_kernel_graph(module, entry)
        except KernelGraphError as exc:
            raise SimulationError(str(exc)) from None
        self.mesh, self.name = self.graph.mesh, self.graph.entry
        if backend == "native":
            self.kernels, self.backend = load_kernels(self.graph)
        elif backend == "jit":
            names = [node.name for node in self.graph.nodes if not isinstance(node, CollectiveNode)]
            self.kernels = lowering.compile_functions(self.graph.kernels_mlir, names)
            self.backend = "jit"
        else:
            raise SimulationError(f"backend={backend!r}: use 'jit' (reference loops) or 'native' (the ranks' kernels)")

    def __call__(self, *arrays: np.ndarray):
        graph = self.graph
        if len(arrays) != len(graph.args):
            raise SimulationError(f"@{self.name} takes {len(graph.args)} arrays, got {len(arrays)}")
        n = self.mesh.device_count
        env: dict[str, list[np.ndarray]] = {}
        for name, array in zip(graph.args, arrays):
            dist = graph.values[name].dist  # uneven dims: the array padded with zeros at their tails
            env[name] = initial_blocks(self.mesh, dist, pad_global(np.asarray(array), dist.shape))
        for node in graph.nodes:
            if isinstance(node, CollectiveNode):
                env[node.output] = self._collective(node, env[node.input])
                continue
            per_device = []
            for rank in range(n):
                args = [np.require(env[v][rank], requirements="C") for v in node.inputs]
                if node.needs_coords:
                    args.append(np.asarray(self.mesh.coords(rank), dtype=np.int64))
                out = self.kernels[node.name](*args)
                per_device.append(out if isinstance(out, tuple) else (out,))
            for index, value in enumerate(node.outputs):
                env[value] = [per_device[rank][index] for rank in range(n)]
        outputs = [assemble(self.mesh, t, env[v], f"result #{i} of @{self.name}", graph.result_shape(i))
                   for i, (v, t) in enumerate(zip(graph.results, graph.result_dists))]
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _collective(self, node: CollectiveNode, blocks: list) -> list:
        after: DistType = node.step.type_after
        out = run_step(Layout.get(self.mesh, after.shape), node.step, blocks)
        local = self.graph.values[node.output].local_shape
        if any(b.shape != local for b in out):
            raise SimulationError(f"'{node.op}' produced blocks of shape {out[0].shape}, its result type says {local}")
        return out


def assemble(mesh, t: DistType, blocks: list, what: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """The global array from every device's block (partial sums added up); replicas must agree. `shape`:
    the logical shape, when `t`'s is padded (uneven dims): the padding at the tails is cut off."""
    layout = Layout.get(mesh, t.shape)
    if subaxes.group_size(mesh, t.partial) > 1:  # partial sums may be over parts of axes
        blocks = list(blocks)
        for row in groups(layout, t.partial):
            total = dtypes.sum_blocks([blocks[r] for r in row])
            for r in row:
                blocks[r] = total
    out = np.empty(t.shape, blocks[0].dtype)
    # A layout's blocks form a grid: two devices' blocks are the same region (replicas) or disjoint, so a region
    # is known by its bounds (a mask of the filled elements cost seconds for a state dict of a gigabyte).
    first: dict[tuple, int] = {}
    for rank in range(mesh.device_count):
        where = block_slices(layout, t, rank)
        region = tuple((s.start, s.stop) for s in where)
        if region in first:
            if not np.array_equal(blocks[first[region]], blocks[rank], equal_nan=True):
                raise SimulationError(f"{what}: device {rank} {mesh.coords(rank)} holds a block that differs "
                                      f"from another replica of it under {t}")
            continue
        first[region] = rank
        out[where] = blocks[rank]
    if shape is not None and tuple(shape) != tuple(t.shape):
        out = np.ascontiguousarray(out[tuple(slice(0, n) for n in shape)])
    return out


def simulate(module, *arrays: np.ndarray, entry: str | None = None):
    """Compile and run the SPMD function once on global arrays; returns the assembled global results."""
    return Simulator(module, entry)(*arrays)
