"""A training session inside the user's own MPI job (`mpiexec -n N python train.py`, as torchrun scripts run):
every rank is a driver of its part, holds only its blocks of the state and runs its part of each step
(`Program.session` under mpiexec). The interface is `session.Session`'s; saving, loading and resharding are
collective (every rank calls them).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from slicer.core.errors import CheckpointError, RunError

from ..execution.executor import RunOptions
from ..state.checkpoint import Checkpoint, begin, save_jobs, write_manifest
from ..state.checkpoint_hosts import open_fitting, read_across, write_here
from ..state.loaded_programs import LoadedPrograms, program_key
from ..state.resident import ResidentRank
from .session import Session, SessionPlan


class InJobSession(Session):
    """The session inside the user's MPI job: this rank holds its blocks and runs its part of each step."""

    def __init__(self, plan: SessionPlan, comm, *, blocks: dict[int, np.ndarray] | None = None,
                 programs: LoadedPrograms | None = None, options: RunOptions | None = None):
        """`blocks`: this rank's blocks of the state (argument index -> block), else taken from `plan.state`;
        `programs`: the programs this rank keeps loaded (a resharded session's, passed on); `options`: how its
        collectives run (None: the environment's defaults)."""
        super().__init__(plan)
        plan.check_feeds()
        self.comm = comm
        self.options = options if options is not None else RunOptions.chosen()
        kept = programs if programs is not None else LoadedPrograms()
        self.programs: LoadedPrograms | None = kept
        key = program_key(plan.graph.to_json(), plan.feeds, plan.arg_names, self.options)
        program = kept.switch(key)
        if program is None:
            program = ResidentRank(plan.graph, comm, feeds=plan.feeds, names=plan.arg_names, options=self.options)
            kept.switch(key, program)
        self.rank_program = program
        rank = self.rank_program.rank
        self.rank_program.put({i: plan.block(a, i, rank) for i, a in plan.state.items()} if blocks is None else
                              {i: b.reshape(self.plan.local_shape(i)) for i, b in blocks.items()})

    def _preload(self, plan):
        """Every rank loads `plan`'s program and keeps it beside the running one (`LoadedPrograms.keep`)."""
        kept = self.programs
        if kept is None:
            raise RunError("this session was resharded (session.reshard): use the one it returned")
        key = program_key(plan.graph.to_json(), plan.feeds, plan.arg_names, self.options)
        if key in kept:
            return False
        kept.keep(key, ResidentRank(plan.graph, self.comm, feeds=plan.feeds, names=plan.arg_names,
                                    options=self.options))
        return True

    def _resharded(self, plan, moves):
        """Every rank moves its blocks (`LoadedPrograms.move_state`), then runs `plan`'s program on them (the one
        it kept loaded, if it ran it before)."""
        kept = self.programs
        if kept is None:
            raise RunError("this session was resharded (session.reshard): use the one it returned")
        new = InJobSession(plan, self.comm, blocks=kept.move_state(moves, self.comm), programs=kept,
                           options=self.options)
        self.programs = None  # handed over: closing this session leaves the new one's programs alone
        return new

    def _step(self, inputs):
        if self.programs is None:
            raise RunError("this session was resharded (session.reshard): use the one it returned")
        rank = self.rank_program.rank
        returned = self.rank_program.step({i: self.plan.block(a, i, rank) for i, a in inputs.items()})
        return self.plan.outputs(self.comm.allgather(returned))

    def state_dict(self):
        mine = self.rank_program.blocks(self.plan.state_jobs()[self.rank_program.rank])
        return self.plan.state_from(self.comm.allgather(mine))

    def save(self, directory) -> Path:
        """As `Session.save`, collectively: every rank writes its blocks, rank 0 the manifest."""
        values = self.plan.state_values()
        directory = Path(directory)
        rank = self.rank_program.rank
        self._everywhere(lambda: begin(directory) if rank == 0 else None)
        jobs = save_jobs(self.plan.graph.mesh, values)
        blocks = self.rank_program.blocks(sorted(jobs[rank]))
        written = self._everywhere(lambda: write_here(directory, {f: (blocks[a], self.plan.local_shape(a))
                                                                  for a, f in jobs[rank].items()}))
        records = {file: record for part in written for file, record in part.items()}
        self._everywhere(lambda: write_manifest(directory, self.plan.graph.mesh, values, self.steps, records)
                         if rank == 0 else None)
        return directory

    def load(self, directory) -> None:
        """As `Session.load`, collectively: rank 0 reads the manifest, then every rank its blocks, from the files
        it sees and over MPI from ranks that see the others (`checkpoint_hosts.read_across`)."""
        rank = self.rank_program.rank
        checkpoint = self._everywhere(lambda: self._open(directory) if rank == 0 else None)[0]
        self.rank_program.put(read_across(checkpoint, self.comm, self.plan.restore_job(rank)))
        self.steps = checkpoint.step

    def _open(self, directory) -> Checkpoint:
        return open_fitting(directory, self.plan.state_values())

    def _everywhere(self, work) -> list:
        """Run `work` on every rank; every rank's result, or on every rank the first rank's CheckpointError."""
        try:
            outcome = ("ok", work())
        except CheckpointError as exc:
            outcome = ("error", f"rank {self.rank_program.rank}: {exc}")
        outcomes = self.comm.allgather(outcome)
        for status, payload in outcomes:
            if status == "error":
                raise CheckpointError(payload)
        return [payload for _, payload in outcomes]

    def close(self):
        if self.programs is not None:
            self.programs.close()


__all__ = ["InJobSession"]
