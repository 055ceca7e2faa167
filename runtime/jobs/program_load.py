"""Making a program the one a job's ranks run (`load_program`), or one they keep loaded for a later switch
(`preload_program`).

A program reaches the ranks as its kernel graph's JSON and the keys of its kernels: each host finds the kernels
in its cache by key, receives the bytes of those it lacks, or compiles them (`kernel_transfer`). The ranks keep
the programs they leave (`runtime/state/loaded_programs.py`), so every load first asks whether they still hold
it ("activate"), and a session about to switch can have the next program loaded ahead ("preload"), so the
switch itself only moves the state (docs/runtime.md, "Train then serve").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from slicer.core.errors import InternalError
from slicer.lowering.cache import host_cpu

from ..execution.executor import RunOptions, kernel_sources, load_kernels
from ..state.loaded_programs import program_key
from ..state.reshard import Reshard
from .kernel_transfer import cache_keys, libraries
from .rank_job import RankJob
from .resources import check_hosts

if TYPE_CHECKING:  # session.py makes sessions by loading programs: the plan's class is only named here
    from .session import SessionPlan


class ProgramLoad(NamedTuple):
    """What `load_program` did: each rank's seconds moving the state and the bytes its resident peak (VmHWM)
    grew by while they ran (0 without moves), and whether the ranks had kept the program loaded (only the moves
    ran)."""

    move_seconds: list
    move_peak_bytes: list
    kept: bool


def load_program(job: RankJob, plan: SessionPlan, *, options: RunOptions, oversubscribe: bool = False,
                 moves: Reshard | None = None) -> ProgramLoad:
    """Make `plan`'s program the one `job`'s ranks run, once each host's ranks fit it (`check_hosts`): the one
    they kept loaded if they ran or preloaded it before, else its kernels compiled (or found in the cache)
    here, once, and found by cache key on every host. With `moves`, the ranks first move the old program's
    state to the new types (`reshard`). `options`: how the ranks run its collectives (part of the program's key:
    a program kept under other options is loaded again)."""
    check_hosts(job.hosts, plan.graph, oversubscribe=oversubscribe)
    graph_json = plan.graph.to_json()
    activated = job.request([("activate", _key(plan, graph_json, options), moves)] * job.ranks)
    if _agreed(activated):
        return _load_report(activated, True)
    head = ("load",) if moves is None else ("reshard", moves)
    return _load_report(job.request(_load_requests(job, plan, graph_json, head, options)), False)


def preload_program(job: RankJob, plan: SessionPlan, *, options: RunOptions, oversubscribe: bool = False) -> bool:
    """Have `job`'s ranks load `plan`'s program and keep it, without state, beside the one they run, so that a
    later `load_program` of it (a reshard to it) only moves the state. False if they held it already."""
    check_hosts(job.hosts, plan.graph, oversubscribe=oversubscribe)
    graph_json = plan.graph.to_json()
    if _agreed(job.request([("holds", _key(plan, graph_json, options))] * job.ranks)):
        return False
    job.request(_load_requests(job, plan, graph_json, ("preload",), options))
    return True


def _key(plan: SessionPlan, graph_json: str, options: RunOptions) -> str:
    return program_key(graph_json, plan.feeds, plan.arg_names, options)


def _agreed(answers: list) -> bool:
    """The ranks' common answer to whether they hold a program (every rank keeps the same ones)."""
    held = [answer is not None and answer is not False for answer in answers]  # "activate" answers None
    if any(held) and not all(held):
        raise InternalError("the ranks of a job keep different programs loaded")
    return all(held)


def _load_requests(job: RankJob, plan: SessionPlan, graph_json: str, head: tuple,
                   options: RunOptions) -> list[tuple]:
    """The requests (one per rank) that load `plan`'s program: `head`, then the graph, the kernels' sources,
    the feeds, the names, the bytes of the kernels the rank's host lacks (asked first, "kernels") and how its
    collectives run."""
    sources = kernel_sources(*load_kernels(plan.graph))
    missing = job.request([("kernels", host_cpu(), cache_keys(sources))] * job.ranks)
    found = libraries(sorted({key for keys in missing if keys for key in keys}))
    return [(*head, graph_json, sources, dict(plan.feeds), plan.arg_names,
             None if keys is None else {key: found[key] for key in keys}, options) for keys in missing]


def _load_report(replies: list, kept: bool) -> ProgramLoad:
    """Each rank's (seconds, peak bytes) of its moves, as a `ProgramLoad`."""
    return ProgramLoad([seconds for seconds, _ in replies], [peak for _, peak in replies], kept)


__all__ = ["ProgramLoad", "load_program", "preload_program"]
