"""Running a pipelined step's stages (`slicer.mpmd.instructions`): each stage's instructions interpreted in order,
its programs called through a runner, its transfers through a transport.

- over MPI (`MpiTransport`): every rank runs its stage; a send starts an `Isend` (completed at the end of
  the step, so a stage goes on computing while its activations travel), a receive waits in `Recv`; the
  peer's rank is the one at that pipeline coordinate with this rank's other coordinates;
- in one process (`run_local`): every stage's interpreter is a generator that yields while a receive has no
  message yet, and the stages are resumed in turn until all returned (the reference of the MPI run).

Values are dropped after their last use, so a stage holds a micro-batch's received values only from their
receive to its backward (what the schedule's peak counts).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from slicer.core import dtypes
from slicer.core.errors import RunError


def last_uses(instructions: Sequence[dict]) -> dict[int, int]:
    """Value id -> the index of the last instruction that reads it."""
    last: dict[int, int] = {}
    for position, ins in enumerate(instructions):
        for value in list(ins.get("operands", [])) + ([ins["operand"]] if "operand" in ins else []):
            last[value] = position
    return last


def interpret(instructions: Sequence[dict], args: Sequence[np.ndarray], call: Callable, transport, stage: int,
              events: list | None = None):
    """A generator running one stage's `instructions` on `args`: yields while a receive waits for its message
    (`transport.receive` returns None), returns the stage's results. `call(callee, arrays) -> arrays`.
    `events`, if given, receives (callee, start, end, cpu) for each call: `time.perf_counter()` seconds and the
    process CPU seconds the call took (every thread of it: on a loaded machine, the work the call did)."""
    env: dict[int, np.ndarray] = dict(enumerate(args))
    last = last_uses(instructions)
    for position, ins in enumerate(instructions):
        op = ins["op"]
        if op == "recv":
            while (got := transport.receive(stage, ins)) is None:
                yield
            env[ins["result"]] = got
        elif op == "send":
            transport.send(stage, ins, env[ins["operand"]])
        elif op == "call":
            start, cpu = time.perf_counter(), time.process_time()
            outs = call(ins["callee"], [env[v] for v in ins["operands"]])
            env.update(zip(ins["results"], outs))
            if events is not None:
                events.append((ins["callee"], start, time.perf_counter(), time.process_time() - cpu))
        elif op == "zeros":
            env[ins["result"]] = np.zeros(ins.get("local_shape", ins["shape"]), dtypes.parse_dtype(ins["dtype"]))
        elif op == "add":
            a, b = (env[v] for v in ins["operands"])
            env[ins["result"]] = a + b
        elif op == "return":
            results = [env[v] for v in ins["operands"]]
            transport.finish(stage)
            return results
        else:
            raise RunError(f"stage {stage}: unknown pipeline instruction {op!r}")
        for value in [v for v, p in last.items() if p == position]:
            env.pop(value, None)
    raise RunError(f"stage {stage}: its instructions end without a return")


class LocalTransport:
    """Messages between the stages of one process, by (tag, source, target)."""

    def __init__(self):
        self.mailbox: dict[tuple, np.ndarray] = {}

    def send(self, stage: int, ins: dict, array: np.ndarray) -> None:
        self.mailbox[(ins["message"], stage, ins["stage"])] = np.array(array, copy=True)

    def receive(self, stage: int, ins: dict) -> np.ndarray | None:
        return self.mailbox.pop((ins["message"], ins["stage"], stage), None)

    def finish(self, stage: int) -> None:
        pass


def run_local(stages: Sequence, args: Sequence[Sequence[np.ndarray]], call: Callable) -> list[list[np.ndarray]]:
    """Every stage (`mpmd.instructions.Stage`) run in this process on its `args`; their results, by stage."""
    transport = LocalTransport()
    running = {s.index: interpret(s.instructions, a, lambda c, v, s=s: call(s.index, c, v), transport, s.index)
               for s, a in zip(stages, args)}
    results: dict[int, list[np.ndarray]] = {}
    while running:
        for index in list(running):
            try:
                next(running[index])
            except StopIteration as done:
                results[index] = done.value
                del running[index]
    return [results[s.index] for s in stages]


class MpiTransport:
    """Transfers between the ranks of a pipelined job: `peers[stage]` is the world rank of this rank's peer at
    that pipeline coordinate; sends complete when the stage returns."""

    def __init__(self, comm, peers: Sequence[int]):
        self.comm, self.peers = comm, list(peers)
        self.pending: list = []

    def send(self, stage: int, ins: dict, array: np.ndarray) -> None:
        data = np.ascontiguousarray(array)
        self.pending.append((self.comm.Isend(data.view(np.uint8).reshape(-1), dest=self.peers[ins["stage"]],
                                             tag=ins["message"]), data))

    def receive(self, stage: int, ins: dict) -> np.ndarray:
        out = np.empty(ins["local_shape"] if "local_shape" in ins else ins["shape"],
                       dtypes.parse_dtype(ins["dtype"]))
        self.comm.Recv(out.view(np.uint8).reshape(-1), source=self.peers[ins["stage"]], tag=ins["message"])
        return out

    def finish(self, stage: int) -> None:
        for request, _ in self.pending:
            request.Wait()
        self.pending.clear()


def run_mpi(instructions: Sequence[dict], args: Sequence[np.ndarray], call: Callable, transport: MpiTransport,
            stage: int, events: list | None = None) -> list[np.ndarray]:
    """One stage run on this rank (receives block, so the generator never yields)."""
    runner = interpret(instructions, args, call, transport, stage, events)
    try:
        while True:
            next(runner)
    except StopIteration as done:
        return done.value


__all__ = ["LocalTransport", "MpiTransport", "interpret", "last_uses", "run_local", "run_mpi"]
