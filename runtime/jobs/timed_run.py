"""A timed run of a kernel graph as every rank does it, and its results and timings put together.

`timed_run` is one rank's part: after a warm-up run (first calls pay one-time costs: symbol resolution, MPI
connections), `repeat` runs measure the total time as users see it (the last one's timeline is kept), and
`repeat` more with a barrier before each collective give the per-step breakdown (waiting for other ranks,
pack, transfer, unpack). `combine` assembles every rank's part into the global results and the run's
`Timings`. A job the driver started runs it on request (`rank_server`'s "timed": the blocks, or a seed, come
over the link); `slicer-run` under the user's mpiexec runs it in that job (`in_job.run_job_here`: rank 0
combines what the ranks gather to it). Collectives overlap kernels unless the run says otherwise
(`RunOptions`: `Program.run(..., overlap=False)`, or `SLICER_OVERLAP=0` as the default).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np

from slicer.lowering import KernelGraph, cache_stats

from ..execution.blocks import random_block, read_block
from ..execution.timings import Timings, reduce_runs
from ..simulation.simulator import assemble
from .rank import at_step


def rank_inputs(graph: KernelGraph, rank: int, *, files=None, seed: int = 0) -> list[np.ndarray]:
    """`rank`'s blocks of every argument: read from the `.npy` `files` (each rank reads only its block), else
    random from `seed` (argument i from seed + i), as the simulator's and every other rank's would be."""
    blocks = []
    for index, name in enumerate(graph.args):
        value = graph.values[name]
        if files:
            blocks.append(read_block(files[index], value.dist, graph.mesh, rank, value.numpy_dtype,
                                     graph.arg_shape(index)))
        else:
            blocks.append(random_block(seed + index, value.dist, graph.mesh, rank, value.numpy_dtype,
                                       graph.arg_shape(index)))
    return blocks


@dataclass(frozen=True)
class RankPart:
    """One rank's share of a timed run: its result blocks and what it measured."""

    results: list
    totals: list
    runs: list
    timeline: list
    compile_seconds: float
    misses: int
    backend: str
    peak: int


def timed_run(executor, blocks: list[np.ndarray], repeat: int, comm) -> RankPart:
    """This rank's part of the timed run (module docstring) with its `blocks` of the arguments."""
    executor.run(blocks)
    totals, runs = [], []
    at_step(executor.rank, "run")
    for _ in range(repeat):
        comm.Barrier()
        start = time.perf_counter()
        results, events = executor.run(blocks)
        totals.append(time.perf_counter() - start)
        timeline = [replace(e, start=e.start - start, end=e.end - start) for e in events]
    for _ in range(repeat):
        comm.Barrier()
        start = time.perf_counter()
        _, events = executor.run(blocks, timed=True)
        runs.append([replace(e, start=e.start - start, end=e.end - start) for e in events])
    return RankPart(results, totals, runs, timeline, executor.compile_seconds, cache_stats().misses,
                    executor.backend, executor.buffers.peak)


def combine(graph: KernelGraph, parts: list[RankPart], repeat: int) -> tuple[list[np.ndarray], Timings]:
    """The global results and the run's timings from every rank's part (rank order)."""
    outputs = [assemble(graph.mesh, dist, [p.results[index] for p in parts], f"result #{index}",
                        graph.result_shape(index)) for index, dist in enumerate(graph.result_dists)]
    seconds, steps = reduce_runs([p.runs for p in parts], [p.totals for p in parts])
    timings = Timings(seconds, steps, len(parts), repeat, max(p.compile_seconds for p in parts),
                      sum(p.misses for p in parts), tuple(sorted({p.backend for p in parts})),
                      tuple(tuple(p.timeline) for p in parts), tuple(p.peak for p in parts))
    return outputs, timings


__all__ = ["RankPart", "combine", "rank_inputs", "timed_run"]
