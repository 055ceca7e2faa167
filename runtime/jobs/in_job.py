"""Running inside the MPI job this process already belongs to (`mpiexec -n N python ...`): the one path of
`slicer.Program.run_in_mpi` and of `slicer-run` (`python -m slicer.runtime`) started under mpiexec.

Both find the job the same way (`job_comm`), check the same way that it has one rank per device of the mesh
(`check_job`), and have every rank run its blocks with the `RankExecutor`; rank 0 assembles the global results
(`slicer.runtime.simulation.simulator.assemble`) and the other ranks get None. How collectives run
(`collectives=`, `overlap=`; `slicer-run --collectives --overlap`) is settled once, as a driver settles it for
the ranks it starts: rank 0's `RunOptions.chosen` (an argument, else the environment's default) holds on every
rank (`settled_options`).
They differ only in where the blocks come from and what is measured:

- `run_arrays`: every rank passes the global arrays (a memory map is enough: each rank reads only its
  blocks); one untimed run. `Program.run_in_mpi`.
- `run_job_here`: the timed run `launch` asks a job it starts for (`runtime.jobs.timed_run`: inputs from `.npy`
  files, each rank reading its block, or a seed; warm-up, `repeat` timed runs), run by the ranks of this job
  instead of a new one; rank 0 gathers the parts and assembles results and timings; any failing rank aborts
  the job (`runtime.jobs.rank`). `slicer-run` under mpiexec.
"""

from __future__ import annotations

import numpy as np

from slicer.core import environment
from slicer.core.errors import KernelAssertionError, OptionError, RunError
from slicer.core.mesh import Mesh
from slicer.lowering import KernelGraph

from ..execution.blocks import take_block
from ..execution.executor import RankExecutor, RunOptions
from ..execution.timings import Timings
from ..simulation.simulator import assemble
from .rank import at_step, run_rank
from .timed_run import combine, rank_inputs, timed_run

#: Set by MPICH/Hydra (`PMI_SIZE`) and Open MPI (`OMPI_COMM_WORLD_SIZE`) in every rank of an mpiexec job.
JOB_SIZE_ENV = (environment.PMI_SIZE, environment.OMPI_COMM_WORLD_SIZE)


def job_comm():
    """COMM_WORLD when this process is one rank of a job of several ranks started by mpiexec, else None (a
    plain process, which starts a job of its own to run on ranks)."""
    size = next((text for text in map(environment.value, JOB_SIZE_ENV) if text is not None), "1")
    if int(size) <= 1:
        return None
    from mpi4py import MPI  # only inside an MPI job

    return MPI.COMM_WORLD


def world():
    """COMM_WORLD of this process (a job of one rank when it was not started by mpiexec)."""
    from mpi4py import MPI  # optional at import time: only MPI runs need it

    return MPI.COMM_WORLD


def check_job(comm, mesh: Mesh) -> None:
    """RunError unless the job has one rank per device of `mesh`."""
    if comm.Get_size() != mesh.device_count:
        raise RunError(f"this MPI job has {comm.Get_size()} ranks but the mesh {mesh} has {mesh.device_count} "
                       f"devices: start it with mpiexec -n {mesh.device_count}")


def settled_options(comm, collectives: str | None = None, overlap: bool | None = None) -> RunOptions:
    """The run options of every rank of the job: rank 0's `RunOptions.chosen(collectives, overlap)` (ranks that
    disagree on how collectives run would wait for each other forever); an `OptionError` on every rank when
    any rank's value means nothing (a collective, so every rank calls it)."""
    try:
        options, problem = RunOptions.chosen(collectives, overlap), None
    except OptionError as exc:
        options, problem = None, str(exc)
    settled = comm.allgather((options, problem))
    problems = [p for _, p in settled if p is not None]
    if problems:
        raise OptionError(problems[0])
    return settled[0][0]


def run_arrays(graph: KernelGraph, arrays, comm, *, collectives: str | None = None,
               overlap: bool | None = None) -> list[np.ndarray] | None:
    """Every rank takes its blocks of the global `arrays` and runs once; rank 0 gets the global results.
    `collectives`, `overlap`: as `Program.run`'s (None: the environment's default), settled on rank 0."""
    check_job(comm, graph.mesh)
    executor = RankExecutor(graph, comm, options=settled_options(comm, collectives, overlap))
    rank = executor.rank
    blocks = [take_block(a, graph.values[n].dist, graph.mesh, rank) for a, n in zip(arrays, graph.args)]
    try:
        results, failed = executor.run(blocks)[0], None
    except KernelAssertionError as exc:  # a check failed on this rank's data: every rank still ran the whole run
        if executor.failed is None:
            raise
        results, failed = None, f"rank {rank}: {exc}"
    gathered = comm.gather(results, root=0)
    # Collective, so only on success: a rank that failed must not wait in it for ranks still running.
    executor.close()
    failures = [f for f in comm.allgather(failed) if f is not None]
    if failures:  # on every rank alike, so no rank waits for another
        raise KernelAssertionError(failures[0])
    if rank != 0:
        return None
    return [assemble(graph.mesh, dist, [blocks_[i] for blocks_ in gathered], f"result #{i}", graph.result_shape(i))
            for i, dist in enumerate(graph.result_dists)]


def run_job_here(graph: KernelGraph, comm, *, inputs: list[str] | None = None, seed: int = 0,
                 repeat: int = 1, collectives: str | None = None,
                 overlap: bool | None = None) -> tuple[list[np.ndarray], Timings] | None:
    """The timed run of `runtime.jobs.timed_run` on the ranks of this job: rank 0 gets (results, timings), the
    others None. `inputs`: one `.npy` path per argument (each rank reads its block), else random from `seed`;
    `collectives`, `overlap`: as in `run_arrays`."""
    check_job(comm, graph.mesh)
    options = settled_options(comm, collectives, overlap)
    holder = {}

    def main(c) -> None:
        executor = RankExecutor(graph, c, options=options)
        at_step(executor.rank, "compiled")
        part = timed_run(executor, rank_inputs(graph, executor.rank, files=inputs, seed=seed), repeat, c)
        holder["parts"] = c.gather(part, root=0)
        executor.close()

    run_rank(main, comm)
    if comm.Get_rank() != 0:
        return None
    return combine(graph, holder["parts"], repeat)


__all__ = ["check_job", "job_comm", "run_arrays", "run_job_here", "settled_options", "world"]
