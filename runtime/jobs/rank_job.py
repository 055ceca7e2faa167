"""A job of MPI ranks that stays up between requests: the launcher side of `runtime.jobs.rank_server`.

`RankJob(ranks)` starts `python -m slicer.runtime.jobs.rank_server` under mpiexec (which may place the ranks on
other hosts: `-hosts`, a hostfile); every rank connects back over TCP (`runtime.jobs.rank_link`: an address the
driver chooses, `SLICER_DRIVER_ADDRESS`, authenticated both ways with a per-job key) and says where it runs
(`hosts`: each rank's host name, cores and available memory, for `resources.check_hosts`). `request` sends
one message to each rank and waits for every reply. A training session keeps its parameters on such a job and
sends only the batch at each step; `Program.run` loads its program on one and asks for a run. The driver's
private directory (mode 0700) holds only the job's stderr.

The wire is `multiprocessing.connection`'s framing of pickled messages (the standard library's), large
messages in chunks (`runtime.jobs.wire`). `sent` counts what went to the ranks: `payload` the bytes of the arrays,
`message` the bytes on the wire, so a test can check that a step sends the batch and nothing else.

Details: docs/module-notes.md, `runtime/jobs/rank_job.py`.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path

import numpy as np

from slicer.core import environment, errors
from slicer.core.errors import LaunchError, RunError

from .mpiexec import end_job, start_spmd
from .rank_link import ADDRESS_ENV, KEY_ENV, Listener
from .resources import HostReport
from .wire import Receiver, send

CONNECT_SECONDS = 120.0  # time for mpiexec to start the ranks and each to import what it needs
SILENCE_ENV = environment.RANK_SILENCE_SECONDS.name
SILENCE_SECONDS = 5.0  # a rank that sends no heartbeat for this long while answering a request is hung


def silence_limit() -> float:
    """How long a busy rank may go without a heartbeat ($SLICER_RANK_SILENCE_SECONDS, default 5 s)."""
    try:
        return max(1.0, float(environment.value(environment.RANK_SILENCE_SECONDS) or SILENCE_SECONDS))
    except ValueError:
        return SILENCE_SECONDS


@dataclass
class Sent:
    """What a job's driver sent to its ranks: array bytes (`payload`) and bytes on the wire (`message`)."""

    payload: int = 0
    message: int = 0


def _array_bytes(value) -> int:
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, dict):
        return sum(_array_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_array_bytes(v) for v in value)
    return 0


class RankJob:
    """`ranks` MPI ranks serving requests (see the module docstring)."""

    def __init__(self, ranks: int, *, mpiexec: str | None = None, timeout: float = 600,
                 env: dict[str, str] | None = None):
        self.ranks, self.timeout, self.sent = ranks, timeout, Sent()
        self.environment: tuple = ()  # the settings it was started under, for `rank_pool`
        self._dir = Path(tempfile.mkdtemp(prefix="slicer-ranks-"))
        self._stderr = open(self._dir / "stderr", "w+")
        key = secrets.token_bytes(32)
        try:
            server = Listener(ranks)
        except BaseException:
            self._stderr.close()
            shutil.rmtree(self._dir, ignore_errors=True)
            raise
        self.process = start_spmd(ranks, [sys.executable, "-m", "slicer.runtime.jobs.rank_server", server.address],
                                  mpiexec=mpiexec, env={**(env or {}), KEY_ENV: key.hex()}, stderr=self._stderr)
        self._finalizer = weakref.finalize(self, _end, self.process, self._dir, self._stderr)
        # per rank, once every rank connected (`_accept`): its connection, process id (on its host) and host
        self.connections: list[Connection] = []
        self.receivers: list[Receiver] = []
        self.pids: list[int] = []
        self.hosts: list[HostReport] = []
        self.silence = silence_limit()
        self._failed: str | None = None
        try:
            self._accept(server, key)
        except BaseException:
            self.close()
            raise
        finally:
            server.close()

    def _accept(self, server: Listener, key: bytes) -> None:
        """Wait until every rank connected and said hello; then fill `connections`, `pids` and `hosts`."""
        deadline = time.monotonic() + CONNECT_SECONDS
        joined: dict[int, tuple[Connection, int, HostReport]] = {}
        try:
            while len(joined) < self.ranks:
                if self.process.poll() is not None:
                    raise RunError(f"the job of {self.ranks} ranks stopped while starting:\n{self._stderr_tail()}")
                if time.monotonic() > deadline:
                    raise LaunchError(f"the {self.ranks} ranks did not connect within {CONNECT_SECONDS:.0f} s (to "
                                      f"{server.address}: on several hosts, {ADDRESS_ENV} names an address of this "
                                      "host the others reach)")
                connection = server.accept(key, 0.2)
                if connection is None:
                    continue
                kind, rank, size, pid, (host, cores, memory) = connection.recv()
                if kind != "hello" or size != self.ranks or rank in joined:
                    connection.close()
                    raise RunError(f"unexpected rank {rank} of {size} connecting to a job of {self.ranks} ranks")
                joined[rank] = connection, pid, HostReport(host, cores, memory)
        except BaseException:
            for connection, _, _ in joined.values():
                connection.close()
            raise
        order = [joined[r] for r in range(self.ranks)]
        self.connections = [connection for connection, _, _ in order]
        self.pids = [pid for _, pid, _ in order]
        self.hosts = [host for _, _, host in order]
        self.receivers = [Receiver(connection) for connection in self.connections]

    @property
    def healthy(self) -> bool:
        """Whether the job is up and serving (no rank failed, not closed)."""
        return self._failed is None and self.process.poll() is None

    def request(self, messages: list[tuple], *, timeout: float | None = None) -> list:
        """Send `messages[r]` to rank r (for every rank), then wait for every reply; returns the payloads. A
        request the ranks refused raises their error (the job serves on)."""
        if self._failed is not None:
            raise RunError(f"this job of {self.ranks} ranks has ended: {self._failed}")
        if self.process.poll() is not None:
            self._fail(f"the job of {self.ranks} ranks has stopped:\n{self._stderr_tail()}")
        for rank, (connection, message) in enumerate(zip(self.connections, messages, strict=True)):
            self.sent.payload += _array_bytes(message)
            try:
                self.sent.message += send(connection, message)
            except OSError:
                self._fail(self._first_error() or self._lost(rank))
        replies = self._replies(self.timeout if timeout is None else timeout)
        refused = [payload for status, payload in replies if status == "refused"]
        if refused:
            raise _refusal(*refused[0])
        return [payload for _, payload in replies]

    def _replies(self, timeout: float) -> list[tuple]:
        """Every rank's (status, payload), read a frame at a time from whichever rank has one (see the module
        docstring); the job is ended on an error, a rank gone or silent, or `timeout`."""
        replies: dict[int, tuple] = {}
        index = {id(c): r for r, c in enumerate(self.connections)}
        start = time.monotonic()
        heard = [start] * self.ranks  # when each rank last said something (a heartbeat or a frame of its reply)
        while len(replies) < self.ranks:
            pending = [c for r, c in enumerate(self.connections) if r not in replies]
            if time.monotonic() - start > timeout:
                self._fail(f"no answer from rank(s) {sorted(index[id(c)] for c in pending)} within {timeout:g} s")
            for connection in wait(pending, timeout=0.5):
                rank = index[id(connection)]
                try:
                    done, message = self.receivers[rank].frame()
                except (EOFError, OSError):
                    self._fail(self._first_error() or self._lost(rank))
                heard[rank] = time.monotonic()
                if done and message[0] == "error":
                    self._fail(message[1])
                if done and message[0] != "beat":
                    replies[rank] = message
            self._check_silence([r for r in range(self.ranks) if r not in replies], heard)
        return [replies[r] for r in range(self.ranks)]

    def _check_silence(self, pending: list[int], heard: list[float]) -> None:
        """End the job if a rank of `pending` said nothing for `silence` seconds and has nothing waiting to be
        read (what waits unread is life the driver has not looked at yet, not silence)."""
        now = time.monotonic()
        quiet = [r for r in pending if now - heard[r] > self.silence]
        if quiet:
            waiting = wait([self.connections[r] for r in quiet], timeout=0)
            silent = [r for r in quiet if self.connections[r] not in waiting]
            if silent:
                self._fail(f"{_ranks(silent)} stopped answering: no heartbeat for {self.silence:g} s while "
                           f"answering a request (the process is hung or stopped); the job of {self.ranks} ranks "
                           f"was ended ({SILENCE_ENV} sets the limit)")

    def _first_error(self) -> str | None:
        """An error message a rank sent before the job ended, if one arrives within a moment: until nothing more
        comes for 0.25 s (a failing rank sends its message, then waits `ABORT_GRACE_SECONDS` before it aborts and
        mpiexec ends the others: their connections closing come after it), at most 2 s."""
        deadline = time.monotonic() + 2.0
        live = dict(enumerate(self.connections))
        while live and time.monotonic() < deadline:
            ready = {id(c) for c in wait(list(live.values()), timeout=0.25)}
            if not ready:
                break
            for rank in [r for r, c in live.items() if id(c) in ready]:
                try:
                    done, message = self.receivers[rank].frame()
                except (EOFError, OSError):
                    del live[rank]
                    continue
                if done and message[0] == "error":
                    return message[1]
        return None

    def _lost(self, rank: int) -> str:
        """What to say when rank `rank`'s connection closed without a reply. A rank on another host: `rank`,
        whose connection closed first (its kernel closes it the moment the process dies; mpiexec ends the
        others only after hearing of it). On this host: the ranks whose process is already gone, else `rank`.
        Looked at before mpiexec ends the others, this names the rank that died; on a loaded
        machine mpiexec may have ended the others already, and which died first cannot be told from outside
        (their processes are mpiexec's children, both were killed), so every gone rank is named."""
        here = socket.gethostname()
        local = [r for r, host in enumerate(self.hosts) if host.name == here]
        gone = [r for r in local if not _alive(self.pids[r])]
        named = (gone or [rank]) if rank in local else [rank]  # another host's: its connection closed first
        what = ("the process ended without replying: killed or crashed" if len(named) == 1 else
                "their processes ended without replying: one was killed or crashed and mpiexec ended the others")
        return (f"{_ranks(named)} of the job of {self.ranks} ranks went away ({what}); the job was ended:\n"
                f"{self._stderr_tail()}")

    def _fail(self, message: str):
        self._failed = message.splitlines()[0] if message else "failed"
        self.close(graceful=False)
        raise RunError(message)

    def _stderr_tail(self) -> str:
        self._stderr.flush()
        try:
            return (self._dir / "stderr").read_text().strip()[-4000:]
        except OSError:
            return ""

    def close(self, *, graceful: bool = True) -> None:
        """Ask every rank to leave (when the job is still healthy), then end the job and remove its files."""
        if graceful and self._failed is None and self.process.poll() is None and self.connections:
            try:
                for connection in self.connections:
                    send(connection, ("close",))
                self._replies(30.0)
                self.process.wait(timeout=10)
            except (RunError, OSError, subprocess.TimeoutExpired):
                pass
        for connection in self.connections:
            connection.close()
        self._failed = self._failed or "closed"
        self._finalizer()


def _refusal(name: str, message: str) -> RunError:
    """The error a rank refused a request with: its catalogue class by `name` (a Slicer error raised there,
    e.g. KernelAssertionError or CheckpointError), RunError for anything else."""
    error = getattr(errors, name, None)
    if isinstance(error, type) and issubclass(error, RunError):
        return error(message)
    return RunError(message if error is None else f"{name}: {message}")


def _ranks(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


def _alive(pid: int) -> bool:
    """Whether process `pid` (on this host) is running: not gone, not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z"
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
            return not Path("/proc").is_dir()
        except OSError:
            return False


def _end(process: subprocess.Popen, directory: Path, stderr) -> None:
    end_job(process)
    stderr.close()
    shutil.rmtree(directory, ignore_errors=True)


__all__ = ["RankJob", "Sent"]
