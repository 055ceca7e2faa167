"""A rank of a job that stays up between calls: `python -m slicer.runtime.jobs.rank_server ADDRESSES` under mpiexec.

The one protocol of every job a driver starts, `Program.run` and `Program.session` alike. The process that
started the job (`runtime.jobs.rank_job.RankJob`) listens on TCP (`runtime.jobs.rank_link`: ADDRESSES are its
`host:port`s, the connection authenticated both ways with the key in `SLICER_SESSION_KEY`); every rank
connects, says which rank it is, on which host (its name, cores and available memory, for
`resources.check_hosts`) and its pid, and then answers requests, one at a time, all ranks the same sequence
(requests that run the program are collective; a pipelined program's, ("pipeline", ...), are answered by
`pipeline_rank`). Nothing comes through the driver's file system, so the ranks
may run on other hosts (listed in docs/module-notes.md, `runtime/jobs/rank_server.py`).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
import traceback

from slicer.core import environment
from slicer.core.errors import CheckpointError, InternalError, KernelAssertionError, SlicerError
from slicer.lowering import KernelGraph

from ..state.checkpoint_hosts import read_across, write_here
from ..state.loaded_programs import LoadedPrograms, program_key
from ..state.reshard import Reshard
from ..state.resident import ResidentRank
from .heap import keep_freed_memory, reset_resident_peak, resident_bytes
from .kernel_transfer import local_sources, missing_keys
from .pipeline_rank import PipelineHolder
from .rank import ABORT_GRACE_SECONDS, at_step
from .rank_link import connect
from .resources import available_memory, host_cores
from .timed_run import rank_inputs, timed_run
from .wire import Receiver, send

BEAT_SECONDS = 0.5  # a busy rank's heartbeat period (the driver's silence limit is 10 of them)
READ_ONLY_REQUESTS = ("get", "save")  # no collective, no state replaced: a rank failing one harms nothing


class Replies:
    """This rank's side of the connection: replies, and a heartbeat every `BEAT_SECONDS` while a request is
    being answered, so the driver tells a rank that works (or waits in a collective) from one that is hung or
    stopped (`RankJob`'s silence limit). Between requests the rank is quiet: nothing piles up unread."""

    def __init__(self, connection):
        self.connection = connection
        self.lock = threading.Lock()
        self.busy = False
        self.stopped = threading.Event()
        threading.Thread(target=self._beat, daemon=True, name="slicer-heartbeat").start()

    def working(self) -> None:
        with self.lock:
            self.busy = True

    def send(self, message) -> None:
        """Send the reply (in chunks when large, `wire.send`: the driver counts every chunk as a sign of life,
        so no heartbeat goes in between) and stop beating until the next request."""
        with self.lock:
            self.busy = False
            send(self.connection, message)

    def stop(self) -> None:
        self.stopped.set()

    def _beat(self) -> None:
        while not self.stopped.wait(BEAT_SECONDS):
            with self.lock:
                if self.busy:
                    try:
                        self.connection.send(("beat", None))
                    except OSError:
                        return


def serve(address: str, comm) -> None:
    """Answer the driver's requests on this rank until it says "close" or goes away."""
    key = environment.value(environment.SESSION_KEY) or ""
    connection = connect(address, bytes.fromhex(key), rank=comm.Get_rank())
    connection.send(("hello", comm.Get_rank(), comm.Get_size(), os.getpid(),
                     (socket.gethostname(), host_cores(), available_memory())))
    replies, receiver = Replies(connection), Receiver(connection)
    programs, pipelines = LoadedPrograms(), PipelineHolder()
    while True:
        try:
            request = receiver.receive()
        except EOFError:  # the driver is gone: nothing left to answer
            break
        replies.working()
        kind = request[0]
        try:
            reply = pipelines.answer(request, comm) if kind == "pipeline" else _answer(request, programs, comm)
        except BaseException as exc:  # noqa: BLE001 - any failure must reach the driver
            if isinstance(exc, SlicerError):
                message = f"slicer rank {comm.Get_rank()} failed: {type(exc).__name__}: {exc}"
            else:
                message = f"slicer rank {comm.Get_rank()} failed:\n{traceback.format_exc()}"
            if _harmless(kind, exc):
                said = str(exc) if kind == "step" else f"rank {comm.Get_rank()}: {exc}"
                replies.send(("refused", (type(exc).__name__, said if isinstance(exc, SlicerError) else message)))
                continue
            _abort(replies, comm, message)
        replies.send(("ok", reply))
        if kind == "close":
            break
    pipelines.close()
    replies.stop()
    connection.close()


def _harmless(kind: str, exc: BaseException) -> bool:
    """Whether request `kind` failing with `exc` left this rank's state, and every other rank, as they were
    (the rank then serves on): a step refused by every rank (`ResidentRank.step` raises KernelAssertionError
    only once all agreed), or a request that reads the state without collectives (a put or restore failing on
    one rank only would leave the ranks' states out of step: that ends the job)."""
    if kind == "step":
        return isinstance(exc, KernelAssertionError)
    if kind == "restore":  # every rank raises the same one before any block is replaced (`read_across`)
        return isinstance(exc, CheckpointError)
    return kind in READ_ONLY_REQUESTS and isinstance(exc, Exception)


def _abort(replies: Replies, comm, message: str) -> None:
    """Report `message` to the driver and stderr, then end the whole job (other ranks may wait for this one)."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    try:
        replies.send(("error", message))
    except OSError:
        pass
    time.sleep(ABORT_GRACE_SECONDS)
    comm.Abort(1)


def _answer(request, programs: LoadedPrograms, comm):
    """This rank's reply to `request`, run on the program `programs` runs (replaced by load, reshard and
    activate requests)."""
    kind = request[0]
    if kind == "kernels":
        return missing_keys(request[1], request[2])
    if kind == "activate":  # the program of key request[1] again, if kept here (every rank keeps the same ones)
        _, key, moves = request
        if key not in programs:
            return None
        return _switch(programs, comm, key, None, moves)
    if kind == "holds":
        return request[1] in programs
    if kind == "preload":  # load a program and keep it for a later switch; the running one goes on
        graph_json, _, feeds, names, _, options = request[1:]
        programs.keep(program_key(graph_json, feeds, names, options), _loaded(request[1:], comm))
        return None
    if kind in ("load", "reshard"):
        moves, fields = (None, request[1:]) if kind == "load" else (request[1], request[2:])
        graph_json, _, feeds, names, _, options = fields
        return _switch(programs, comm, program_key(graph_json, feeds, names, options), fields, moves)
    if kind == "close":
        programs.close()
        return None
    program = programs.running
    if program is None:
        raise InternalError(f"request {kind!r} before a program was loaded")
    if kind == "put":
        program.put(request[1])
        return None
    if kind == "step":
        at_step(program.rank, f"step{program.steps}")
        return program.step(request[1])
    if kind == "get":
        return program.blocks(request[1])
    if kind == "save":
        _, directory, files = request
        blocks = program.blocks(sorted(files))
        g = program.graph
        return write_here(directory, {file: (blocks[arg], g.values[g.args[arg]].local_shape)
                                      for arg, file in files.items()})
    if kind == "timed":
        _, given, seed, repeat = request
        inputs = given if given is not None else rank_inputs(program.graph, program.rank, seed=seed)
        return timed_run(program.executor, [program.checked(i, b) for i, b in enumerate(inputs)], repeat, comm)
    if kind == "restore":
        _, checkpoint, wanted = request
        program.put(read_across(checkpoint, comm, wanted))
        return None
    raise InternalError(f"unknown request {kind!r}")


def _loaded(fields, comm) -> ResidentRank:
    """The program of a load request's `fields` (graph JSON, kernel sources, feeds, names, kernel bytes
    received, `RunOptions`), loaded on this rank without state."""
    graph_json, sources, feeds, names, received, options = fields
    graph = KernelGraph.from_json(graph_json)
    return ResidentRank(graph, comm, feeds=feeds, names=names, options=options,
                        kernel_sources=local_sources(graph, sources, received))


def _switch(programs: LoadedPrograms, comm, key: str, fields, moves: Reshard | None) -> tuple[float, int]:
    """Run the program of `key`: the one loaded from a "load" request's `fields`, or (None) the one kept. With
    `moves`, the running program's state is moved to the new layout first (the old blocks freed as they move);
    returns the seconds the moves took on this rank and the bytes its resident peak grew by meanwhile (VmHWM
    over the resident bytes before). The program left is kept loaded (`LoadedPrograms`)."""
    moved, seconds, peak = None, 0.0, 0
    if moves is not None:
        reset_resident_peak()
        before, start = resident_bytes()[0], time.perf_counter()
        moved = programs.move_state(moves, comm)
        seconds, peak = time.perf_counter() - start, max(0, resident_bytes()[1] - before)
    program = programs.switch(key) if fields is None else programs.switch(key, _loaded(fields, comm))
    if program is None:
        raise InternalError("activate: the program is not kept on this rank")
    if moved is None:
        program.resident.clear()  # a kept program starts without state, as a loaded one does
    else:
        graph = program.graph
        program.put({i: block.reshape(graph.values[graph.args[i]].local_shape) for i, block in moved.items()})
    at_step(program.rank, "compiled")
    return seconds, peak


def main(argv: list[str] | None = None) -> None:
    from mpi4py import MPI  # the rank of an MPI job

    keep_freed_memory()
    serve((argv or sys.argv[1:])[0], MPI.COMM_WORLD)


if __name__ == "__main__":
    main()
