"""The Python front door: `slicer.compile(...)` gives a `Program` to explain and run.

    prog = slicer.compile(text, mesh=slicer.Mesh(x=2, y=2),
                          tactics=[slicer.Tile(arg=1, dim=1, axes="y"), slicer.Tile(arg=3, dim=0, axes="y")])
    print(prog.explain())                 # distributed types, collectives, bytes, kernels
    out = prog.run(x, w1, b1, w2, ranks=4)    # 4 MPI ranks (mpiexec), numpy in and out
    out = prog.run(x, w1, b1, w2)             # ranks=None: the in-process SPMD simulator
    out = prog.run_in_mpi(x, w1, b1, w2)      # already under mpiexec: each rank takes its blocks

Compilation is tactics -> propagation -> partitioning -> kernel extraction; the
stages are the passes `slicer-opt` runs, so any stage can be reproduced there.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
from mlir import ir

from slicer.dialect import make_context
from slicer.lowering.kernel_graph import KernelGraph
from slicer.passes.pipeline import run_pipeline
from slicer.propagation.api import explain as explain_propagation
from slicer.redistribution import Mesh
from slicer.tactics import Replicate, Tile, apply_tactics
from slicer.tools.slicer_opt import parse_source


class CompileError(ValueError):
    """The program cannot be partitioned as asked (the message has the located diagnostics)."""


class RunError(RuntimeError):
    """A run failed: bad arguments, or a rank failed (the message has that rank's traceback)."""


@dataclass
class Program:
    """A partitioned program: the original, its SPMD form and kernel graph (immutable once built)."""

    original: str
    spmd: str
    graph: KernelGraph
    propagation: str
    last_timings: dict = field(default_factory=dict, compare=False)

    @property
    def mesh(self) -> Mesh:
        return self.graph.mesh

    def explain(self) -> str:
        """The readable report: distributed types, collectives with bytes per device, kernels."""
        from slicer.spmd import report

        with make_context():
            collectives = report(ir.Module.parse(self.spmd)).text()
        g = self.graph
        lines = [f"@{g.entry} on mesh {g.mesh} ({g.mesh.device_count} devices)", "distributed types:"]
        for i, name in enumerate(g.args):
            v = g.values[name]
            lines.append(f"  arg #{i}: {v.dtype}{list(v.dist.shape)} as {v.dist} (local {list(v.local_shape)})")
        for i, (dist, source) in enumerate(zip(g.result_dists, g.result_sources)):
            lines.append(f"  result #{i}: {list(dist.shape)} as {dist} ({source})")
        lines += ["collectives:", *("  " + line for line in collectives.splitlines()),
                  "propagation:", *("  " + line for line in self.propagation.splitlines()), str(g)]
        return "\n".join(lines)

    # -- running -----------------------------------------------------------------------------------------
    def _check_arrays(self, arrays) -> list[np.ndarray]:
        g = self.graph
        if len(arrays) != len(g.args):
            raise RunError(f"@{g.entry} takes {len(g.args)} arrays, got {len(arrays)}")
        checked = []
        for i, (array, name) in enumerate(zip(arrays, g.args)):
            array = np.asarray(array)
            v = g.values[name]
            want = v.numpy_dtype
            if tuple(array.shape) != tuple(v.dist.shape) or array.dtype != want:
                raise RunError(f"argument #{i} of @{g.entry} must be {want}{list(v.dist.shape)}, got "
                               f"{array.dtype}{list(array.shape)}")
            checked.append(array)
        return checked

    def run(self, *arrays: np.ndarray, ranks: int | None = None, timeout: float = 600, mpiexec: str | None = None,
            oversubscribe: bool = False):
        """Run on `ranks` MPI ranks (None: the in-process simulator); returns numpy arrays (a tuple when
        the function has several results). More ranks than this host's cores need `oversubscribe=True`."""
        from slicer.runtime.resources import ResourceError, check_memory, check_ranks

        arrays = self._check_arrays(arrays)
        if ranks is None:
            from slicer.spmd import SpmdProgram

            try:
                check_memory(self.graph, self.mesh.device_count, what="simulated devices in this process")
            except ResourceError as exc:
                raise RunError(str(exc)) from None
            return SpmdProgram(self.graph)(*arrays)
        if ranks != self.mesh.device_count:
            raise RunError(f"the mesh {self.mesh} has {self.mesh.device_count} devices: run with "
                           f"ranks={self.mesh.device_count}")
        try:
            check_ranks(ranks, oversubscribe)
            check_memory(self.graph, ranks)
        except ResourceError as exc:
            raise RunError(str(exc)) from None
        job_dir = Path(tempfile.mkdtemp(prefix="slicer-run-"))
        try:
            inputs = []
            for i, array in enumerate(arrays):
                np.save(job_dir / f"input{i}.npy", array)
                inputs.append(str(job_dir / f"input{i}.npy"))
            results = launch(self.graph, job_dir, ranks, inputs=inputs, timeout=timeout, mpiexec=mpiexec)
            self.last_timings = json.loads((job_dir / "timings.json").read_text())
        finally:
            shutil.rmtree(job_dir, ignore_errors=True)
        return results[0] if len(results) == 1 else tuple(results)

    def run_in_mpi(self, *arrays: np.ndarray, comm=None):
        """For code already running under mpiexec: every rank passes the global arrays (a memory map
        is enough: each rank reads only its blocks); rank 0 gets the results, the others None."""
        from mpi4py import MPI

        from slicer.runtime.blocks import rank_slices
        from slicer.runtime.executor import RankExecutor
        from slicer.spmd.simulator import assemble

        comm = comm or MPI.COMM_WORLD
        arrays = self._check_arrays(arrays)
        executor = RankExecutor(self.graph, comm)
        rank, g = executor.rank, self.graph
        blocks = [np.require(a[rank_slices(g.mesh, g.values[n].dist, rank)], requirements="C") for a, n in zip(arrays, g.args)]
        results, _ = executor.run(blocks)
        gathered = comm.gather(results, root=0)
        if rank != 0:
            return None
        outputs = [assemble(g.mesh, dist, [blocks_[i] for blocks_ in gathered], f"result #{i}")
                   for i, dist in enumerate(g.result_dists)]
        return outputs[0] if len(outputs) == 1 else tuple(outputs)


def launch(graph: KernelGraph, job_dir: Path, ranks: int, *, inputs: Sequence[str] | None = None, seed: int = 0,
           timeout: float = 600, mpiexec: str | None = None) -> list[np.ndarray]:
    """Run `graph` on `ranks` MPI ranks with inputs from `.npy` files (or random from `seed`);
    results are written to and read from `job_dir`."""
    from slicer.runtime.executor import load_kernels
    from slicer.runtime.mpiexec import run_spmd

    # Compile (or find in the cache) once here, so the ranks only load the kernels.
    load_kernels(graph)
    (job_dir / "graph.json").write_text(graph.to_json())
    (job_dir / "job.json").write_text(json.dumps({"inputs": list(inputs) if inputs else None, "seed": seed}))
    done = run_spmd(ranks, [sys.executable, "-m", "slicer.runtime.job", str(job_dir)], timeout=timeout, mpiexec=mpiexec)
    if done.returncode != 0:
        raise RunError(f"the SPMD job failed on {ranks} ranks (exit {done.returncode}):\n{done.stderr.strip()[-4000:]}")
    return [np.load(job_dir / f"result{i}.npy") for i in range(len(graph.results))]


def compile(module, *, mesh: Mesh, tactics: Sequence[Tile | Replicate] = (), entry: str | None = None,  # noqa: A001
            source_name: str | None = None) -> Program:
    """Partition `module` (text or IR) over `mesh` with `tactics` (plus its IR annotations).
    `source_name` names the text's file in locations (provenance of collectives)."""
    if not isinstance(mesh, Mesh):
        raise CompileError(f"mesh must be a slicer.Mesh (e.g. slicer.Mesh(x=2, y=2)), got {mesh!r}")
    original = module if isinstance(module, str) else str(module)
    with make_context():
        try:
            parsed = parse_source(original, source_name or "<text>")
            apply_tactics(parsed, tuple(tactics), mesh=mesh, entry=entry)
            run_pipeline(parsed, "slicer-propagate")
            propagation = explain_propagation(parsed)
            run_pipeline(parsed, "slicer-partition")
        except ir.MLIRError as exc:
            raise CompileError(str(exc)) from None
        spmd = parsed.get_asm(enable_debug_info=True)  # keeps provenance locations
    return Program(original, spmd, KernelGraph.from_spmd(spmd, entry), propagation)
