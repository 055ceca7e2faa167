"""Faults the MPI tests inject into ranks: the file `$SLICER_RANK_HOOK` names (`slicer.runtime.jobs.rank.at_step`).

`kill_env("R")` / `kill_env("R:step")` make rank R die abruptly (no cleanup, like a crashed process) at its
first named step (or at `step`); `hang_env("R:step")` stops it there (SIGSTOP, like a hung process). Each returns
the environment a job must start with: the hook and the test's own variable, which only this file reads.
"""

from __future__ import annotations

import os
import signal
import sys

from slicer.core.environment import RANK_HOOK

KILL = "SLICER_TEST_KILL_RANK"
HANG = "SLICER_TEST_HANG_RANK"


def kill_env(spec: str) -> dict[str, str]:
    """The environment that kills rank `spec` ("R" or "R:step")."""
    return {RANK_HOOK.name: __file__, KILL: spec}


def hang_env(spec: str) -> dict[str, str]:
    """The environment that stops rank `spec` ("R:step")."""
    return {RANK_HOOK.name: __file__, HANG: spec}


def at_step(rank: int, step: str) -> None:
    """Called by the rank at each named step: die or stop when the test asked for this rank and step."""
    hang = os.environ.get(HANG, "").partition(":")
    if hang[0] and int(hang[0]) == rank and hang[2] == step:
        sys.stderr.write(f"slicer rank {rank}: stopped by {HANG} at {step}\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGSTOP)
    target, _, at = os.environ.get(KILL, "").partition(":")
    if target and int(target) == rank and (not at or at == step):
        sys.stderr.write(f"slicer rank {rank}: killed by {KILL} at {step}\n")
        sys.stderr.flush()
        os._exit(17)
